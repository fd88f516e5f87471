//! `zlink-chat`: chat from a terminal through a zlink host's STREAM listener (issue 19 item 9),
//! on the Stream Connector.
//!
//! ```text
//! zlink-chat --addr 127.0.0.1:7200 --user ann [--token T] [--room lobby]
//! ```
//!
//! It logs in (`chat.Login`: the host binds the session to Actor `player:<user>`), then reads
//! stdin line by line:
//!
//! - `/join <room>` — join room `<room>` (`chat.Join`; one room at a time);
//! - `/leave` — leave it (`chat.Leave`);
//! - `/wait <ms>` — pause reading (for scripted input);
//! - `/quit` — leave; end of input does the same;
//! - anything else — say it in the room (`chat.Say`: player → room → every member → push).
//!
//! Lines said in the room arrive as `chat.Line` pushes and are printed to stdout as
//! `<room> <user>: <text>`; everything else (`* …`) goes to stderr. Exit code 0, or 1 with a
//! message when the host cannot be reached or refuses the login.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zlink_connector::{Connector, ConnectorConfig, ConnectorEvent, DispatchMode, RequestError};
use zlink_protocol::json::JsonMessage;

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Login {
    user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}
impl JsonMessage for Login {
    const PACKET_NAME: &'static str = "chat.Login";
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoggedIn {
    player: String,
    owner_rid: String,
}
impl JsonMessage for LoggedIn {
    const PACKET_NAME: &'static str = "chat.LoggedIn";
}

#[derive(Debug, Serialize, Deserialize)]
struct Join {
    room: String,
}
impl JsonMessage for Join {
    const PACKET_NAME: &'static str = "chat.Join";
}

#[derive(Debug, Serialize, Deserialize)]
struct Joined {
    room: String,
    members: usize,
}
impl JsonMessage for Joined {
    const PACKET_NAME: &'static str = "chat.Joined";
}

#[derive(Debug, Serialize, Deserialize)]
struct Leave {}
impl JsonMessage for Leave {
    const PACKET_NAME: &'static str = "chat.Leave";
}

#[derive(Debug, Serialize, Deserialize)]
struct Say {
    text: String,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "chat.Say";
}

#[derive(Debug, Serialize, Deserialize)]
struct Line {
    room: String,
    from: String,
    text: String,
}
impl JsonMessage for Line {
    const PACKET_NAME: &'static str = "chat.Line";
}

struct Args {
    addr: String,
    user: String,
    token: Option<String>,
    room: Option<String>,
}

const USAGE: &str = "usage: zlink-chat --addr HOST:PORT --user NAME [--token T] [--room ROOM]";

fn parse_args() -> Result<Args, String> {
    let mut addr = None;
    let mut user = None;
    let mut token = None;
    let mut room = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--addr" => addr = Some(value()?),
            "--user" => user = Some(value()?),
            "--token" => token = Some(value()?),
            "--room" => room = Some(value()?),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        addr: addr.ok_or_else(|| format!("--addr is required\n{USAGE}"))?,
        user: user.ok_or_else(|| format!("--user is required\n{USAGE}"))?,
        token,
        room,
    })
}

fn describe(e: &RequestError) -> String {
    match e {
        RequestError::Remote(p) => format!("{:?}: {}", p.kind, p.detail),
        other => other.to_string(),
    }
}

async fn join(c: &Connector, room: &str) {
    match c
        .request(&Join {
            room: room.to_owned(),
        })
        .timeout(TIMEOUT)
        .await
    {
        Ok(r) => match r.json::<Joined>() {
            Ok(j) => eprintln!("* joined {} ({} members)", j.room, j.members),
            Err(e) => eprintln!("* join answer unreadable: {e}"),
        },
        Err(e) => eprintln!("* join {room} failed: {}", describe(&e)),
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut config = ConnectorConfig::new(args.addr.clone());
    config.dispatch_mode = DispatchMode::Immediate;
    let c = Connector::builder(config)
        .on_send(|l: Line| println!("{} {}: {}", l.room, l.from, l.text))
        .on_event(|e: &ConnectorEvent| match e {
            ConnectorEvent::Connected { .. } => {}
            other => eprintln!("* {other:?}"),
        })
        .connect()
        .await
        .map_err(|e| format!("cannot reach {}: {e}", args.addr))?;
    let login = Login {
        user: args.user.clone(),
        token: args.token.clone(),
    };
    let who: LoggedIn = c
        .request(&login)
        .timeout(TIMEOUT)
        .await
        .map_err(|e| format!("login refused: {}", describe(&e)))?
        .json()
        .map_err(|e| format!("login answer unreadable: {e}"))?;
    eprintln!("* logged in as {} (on {})", who.player, who.owner_rid);
    if let Some(room) = &args.room {
        join(&c, room).await;
    }
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(room) = line.strip_prefix("/join ") {
            join(&c, room.trim()).await;
        } else if line == "/leave" {
            if let Err(e) = c.request(&Leave {}).timeout(TIMEOUT).await {
                eprintln!("* leave failed: {}", describe(&e));
            }
        } else if let Some(ms) = line.strip_prefix("/wait ") {
            let ms: u64 = ms
                .trim()
                .parse()
                .map_err(|_| format!("/wait needs milliseconds: {line:?}"))?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
        } else if line == "/quit" {
            break;
        } else if let Err(e) = c
            .send(&Say {
                text: line.to_owned(),
            })
            .await
        {
            eprintln!("* not sent: {e}");
        }
    }
    c.close().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zlink-chat: no runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zlink-chat: {e}");
            ExitCode::from(1)
        }
    }
}
