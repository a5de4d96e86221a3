//! A client's request passed on to schedd by another process (a node's relay, a follower
//! replica): its gRPC method, body and protocol headers as the client sent them, with none of
//! the client's own metadata, and the metadata of the one passing it on in its place.

use tonic::codegen::http;
use tonic::metadata::MetadataMap;

/// The client's headers passed on: gRPC's own (its deadline and encodings), never metadata
/// the client chose.
const PASSED_HEADERS: [&str; 5] = [
    "content-type",
    "te",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-accept-encoding",
];

/// The request to send on for a client's request (`parts`, `body`): to `uri`, with the
/// client's gRPC headers and `metadata` (the caller as the one passing it on vouches for it).
pub fn passed_on<B>(
    parts: http::request::Parts,
    body: B,
    uri: http::Uri,
    metadata: MetadataMap,
) -> http::Request<B> {
    let mut outgoing = http::Request::new(body);
    *outgoing.method_mut() = parts.method;
    *outgoing.uri_mut() = uri;
    let headers = outgoing.headers_mut();
    for name in PASSED_HEADERS {
        if let Some(value) = parts.headers.get(name) {
            headers.insert(name, value.clone());
        }
    }
    headers.extend(metadata.into_headers());
    outgoing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_grpc_headers_and_the_given_metadata_go_on() {
        let request = http::Request::builder()
            .method("POST")
            .uri("/ysched.v1.Ysched/ListJobs")
            .header("content-type", "application/grpc")
            .header("grpc-timeout", "5S")
            .header("authorization", "Bearer forged")
            .header("ysched-caller-bin", "Zm9yZ2Vk")
            .body(())
            .unwrap();
        let (parts, body) = request.into_parts();
        let mut metadata = MetadataMap::new();
        metadata.insert("authorization", "Bearer relay".parse().unwrap());
        let uri: http::Uri = "https://10.0.0.1:7000/ysched.v1.Ysched/ListJobs"
            .parse()
            .unwrap();
        let out = passed_on(parts, body, uri.clone(), metadata);
        assert_eq!(out.method(), http::Method::POST);
        assert_eq!(out.uri(), &uri);
        let headers = out.headers();
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["grpc-timeout"], "5S");
        assert_eq!(headers["authorization"], "Bearer relay");
        assert!(headers.get("ysched-caller-bin").is_none());
        assert_eq!(headers.len(), 3);
    }
}
