//! The CA's certificates, host identities and enrolment tokens.

use super::*;

#[test]
fn issues_from_a_reloaded_ca() {
    let ca = ClusterCa::generate().unwrap();
    assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let again = ClusterCa::from_pem(&ca.cert_pem, &ca.key_pem()).unwrap();
    let issued = again
        .issue_server(&["127.0.0.1".into(), "head1".into()])
        .unwrap();
    assert!(issued.cert_pem.contains("BEGIN CERTIFICATE"));
    assert!(issued.key_pem.contains("PRIVATE KEY"));
    assert!(ClusterCa::from_pem(&ca.cert_pem, "not a key").is_err());
}

fn der_of(pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}

const NOW: i64 = 1_800_000_000;

#[test]
fn a_signed_request_carries_the_tokens_identity_not_the_one_asked_for() {
    let ca = ClusterCa::generate().unwrap();
    // The host asks for "gpu-7"; the token says "gpu-1", generation 3.
    let (_key, request) = enrol::new_request("gpu-7").unwrap();
    let identity = HostIdentity {
        role: HostRole::Compute,
        name: "gpu-1".into(),
        generation: 3,
    };
    let cert = ca.sign_request(&request, &identity, NOW).unwrap();
    assert_eq!(HostIdentity::from_cert_der(&der_of(&cert)), Some(identity));
    // Names up to the longest node name, in any printable characters.
    let long = HostIdentity {
        role: HostRole::Login,
        name: format!("login.é:{}", "x".repeat(245)),
        generation: u64::MAX,
    };
    let cert = ca.sign_request(&request, &long, NOW).unwrap();
    assert_eq!(HostIdentity::from_cert_der(&der_of(&cert)), Some(long));
    // A request whose signature does not match its key is refused.
    let mut forged = request.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert!(matches!(
        ca.sign_request(&forged, &HostIdentity::replica(1), NOW),
        Err(TlsError::BadRequest(_))
    ));
    assert!(ca
        .sign_request(b"garbage", &HostIdentity::replica(1), NOW)
        .is_err());
}

#[test]
fn replicas_issue_their_own_and_the_server_certificate_names_no_host() {
    let ca = ClusterCa::generate().unwrap();
    let issued = ca.issue_replica(2, NOW).unwrap();
    let identity = HostIdentity::from_cert_der(&der_of(&issued.cert_pem)).unwrap();
    assert_eq!(identity, HostIdentity::replica(2));
    assert_eq!(identity.replica_place(), Some(2));
    let server = ca.issue_server(&[]).unwrap();
    assert_eq!(HostIdentity::from_cert_der(&der_of(&server.cert_pem)), None);
    assert_eq!(HostIdentity::from_cert_der(&der_of(&ca.cert_pem)), None);
    assert_eq!(HostIdentity::from_cert_der(b"not a certificate"), None);
}

#[test]
fn tokens_verify_only_whole_unexpired_and_from_this_cluster() {
    let ca = ClusterCa::generate().unwrap();
    let key = ca.token_key();
    let token = EnrolToken {
        name: "node.1".into(),
        role: HostRole::Compute,
        generation: 2,
        expires_ms: 5_000,
    };
    let text = token.encode(&key);
    assert!(text.starts_with("ysched-enrol-1."), "{text}");
    assert_eq!(
        EnrolToken::unverified_host(&text),
        Some(("node.1".to_string(), HostRole::Compute))
    );
    assert_eq!(EnrolToken::unverified_host("garbage"), None);
    assert_eq!(EnrolToken::verify(&text, &key, 5_000), Ok(token.clone()));
    assert_eq!(
        EnrolToken::verify(&format!("  {text}\n"), &key, 1_000),
        Ok(token.clone())
    );
    assert!(matches!(
        EnrolToken::verify(&text, &key, 5_001),
        Err(TokenError::Expired { ref name, .. }) if name == "node.1"
    ));
    // Another cluster's CA.
    let other = ClusterCa::generate().unwrap().token_key();
    assert_eq!(
        EnrolToken::verify(&text, &other, 0),
        Err(TokenError::BadSignature)
    );
    // Any field changed: the generation, the role, the expiry.
    for (from, to) in [
        (".2.", ".3."),
        (".compute.", ".login."),
        (".5000.", ".9000."),
    ] {
        let altered = text.replacen(from, to, 1);
        assert_ne!(altered, text);
        assert_eq!(
            EnrolToken::verify(&altered, &key, 0),
            Err(TokenError::BadSignature)
        );
    }
    let cut = &text[..text.len() - 1];
    assert_eq!(EnrolToken::verify(cut, &key, 0), Err(TokenError::Malformed));
    assert_eq!(
        EnrolToken::verify("hello", &key, 0),
        Err(TokenError::NotAToken)
    );
    assert_eq!(
        EnrolToken::verify(&"ysched-enrol-1.".repeat(100), &key, 0),
        Err(TokenError::NotAToken)
    );
}
