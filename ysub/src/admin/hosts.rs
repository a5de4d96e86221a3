//! `yctl node enrol|revoke|hosts`: hosts' own credentials. A token from `enrol` is what a new
//! (or rebuilt) host trades for its certificate (`noded --enrol-token FILE`); `revoke` ends a
//! host's trust at once; `hosts` lists every host enrolled.

use crate::client::{reply, Client};
use crate::output::{print_json, print_stdout};
use anyhow::{anyhow, Context, Result};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use ysched_common::text::escape_for_terminal;
use ysched_common::time::rfc3339;
use ysched_proto as pb;

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// Make a one-time token that enrols host NAME: on that host, `noded --enrol-token FILE`
    /// trades it for the host's own certificate (and retires any earlier one of NAME)
    Enrol(EnrolArgs),
    /// Take no certificate of host NAME any more: its agent's session ends now, and it comes
    /// back only by enrolling again with a new token
    Revoke {
        #[arg(value_name = "NAME")]
        name: String,
    },
    /// List every host ever enrolled: its role, when it enrolled (or was revoked), and
    /// whether its agent is connected
    Hosts {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct EnrolArgs {
    /// The host's node name (as its agent registers: `noded --name`, default its host name)
    #[arg(value_name = "NAME")]
    pub name: String,
    /// A login host: its agent runs nothing and relays every user of its host (a compute
    /// node relays only the users with a job running on it)
    #[arg(long)]
    pub login: bool,
    /// How long the token is good for (`30m`, `12h`, `2d`; at most 7 days)
    #[arg(long, value_name = "DURATION", default_value = "1h")]
    pub valid: String,
    /// Write the token to FILE (created 0600) instead of printing it
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(serde::Serialize)]
struct TokenJson<'a> {
    name: &'a str,
    role: &'a str,
    generation: u64,
    expires: String,
    /// Absent when written to a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
}

#[derive(serde::Serialize)]
pub struct HostJson {
    pub name: String,
    pub role: String,
    pub generation: u64,
    pub time: String,
    pub revoked: bool,
    pub connected: bool,
}

/// Runs `yctl node ...` over `client`.
pub async fn run(client: &mut Client, command: NodeCommand) -> Result<()> {
    match command {
        NodeCommand::Enrol(args) => enrol(client, args).await,
        NodeCommand::Revoke { name } => {
            reply(client.revoke_host(pb::NodeRef { name: name.clone() }).await)?;
            print_stdout(&format!(
                "host {} revoked: its certificate is refused from now on\n",
                escape_for_terminal(&name)
            ))
        }
        NodeCommand::Hosts { json } => {
            let hosts = reply(client.list_hosts(pb::ListHostsRequest {}).await)?.hosts;
            if json {
                print_json(&hosts.iter().map(host_to_json).collect::<Vec<_>>())
            } else {
                print_stdout(&format_hosts_table(&hosts))
            }
        }
    }
}

async fn enrol(client: &mut Client, args: EnrolArgs) -> Result<()> {
    ysched_common::limits::NODE_NAME
        .check_len(&args.name)
        .map_err(|e| anyhow!(e))?;
    let valid_ms = ysched_common::time::parse_humantime_ms(&args.valid)
        .map_err(|e| anyhow!("--valid {}: {e}", args.valid))?;
    let valid_secs = u64::try_from(valid_ms / 1000).unwrap_or(0).max(1);
    let token = reply(
        client
            .enrol_host(pb::EnrolHostRequest {
                name: args.name.clone(),
                login: args.login,
                valid_secs,
            })
            .await,
    )?;
    let role = if args.login { "login" } else { "compute" };
    if let Some(path) = &args.output {
        write_token(path, &token.token)?;
    }
    let expires = rfc3339(token.expires_ms);
    if args.json {
        return print_json(&TokenJson {
            name: &args.name,
            role,
            generation: token.generation,
            expires,
            token: args.output.is_none().then_some(token.token.as_str()),
        });
    }
    let name = escape_for_terminal(&args.name);
    let hint = match &args.output {
        Some(path) => format!(
            "token for {role} host {name} written to {} (valid until {expires}); copy it to \
             the host and start its agent with: noded --enrol-token FILE",
            path.display()
        ),
        None => format!(
            "token for {role} host {name} (valid until {expires}, good for one enrolment); on \
             {name}, put it in a file readable by root only and start its agent with: noded \
             --enrol-token FILE"
        ),
    };
    eprintln!("{hint}");
    if args.output.is_none() {
        print_stdout(&format!("{}\n", token.token))?;
    }
    Ok(())
}

/// Writes the token to a new file of mode 0600 (it is the host's identity until used).
fn write_token(path: &Path, token: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {} for the token", path.display()))?;
    file.write_all(format!("{token}\n").as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

pub fn host_to_json(h: &pb::HostInfo) -> HostJson {
    HostJson {
        name: h.name.clone(),
        role: h.role.clone(),
        generation: h.generation,
        time: rfc3339(h.time_ms),
        revoked: h.revoked,
        connected: h.connected,
    }
}

/// `yctl node hosts` as a table.
pub fn format_hosts_table(hosts: &[pb::HostInfo]) -> String {
    let rows: Vec<[String; 4]> = hosts
        .iter()
        .map(|h| {
            let state = match (h.revoked, h.connected) {
                (true, _) => "revoked",
                (false, true) => "connected",
                (false, false) => "not connected",
            };
            [
                escape_for_terminal(&h.name).into_owned(),
                h.role.clone(),
                rfc3339(h.time_ms),
                state.to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "ROLE", "SINCE", "STATE"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(header.map(String::from)).chain(rows) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
