//! A flood of bad requests on the control socket: every line is answered
//! with an error, clients beyond the agent's cap are told it is busy, and
//! the agent goes on accounting exactly and answering good requests.
use std::{
    io::{BufRead, BufReader, ErrorKind, Write},
    os::unix::net::UnixStream,
    path::Path,
};

use gpumem::control::{
    protocol::Response,
    socket::{MAX_CLIENTS, MAX_LINE},
};
use gpumem_tests::harness::*;

/// Malformed lines of every kind a client can send: not JSON, JSON of the
/// wrong shape, nested past any parser's depth, requests the agent does
/// not know, bad arguments.
fn malformed() -> Vec<String> {
    let mut lines: Vec<String> = MALFORMED.iter().map(|l| l.to_string()).collect();
    lines.push("[".repeat(20_000));
    lines.push(format!("{{\"request\":\"status\",\"x\":{}}}", "[".repeat(20_000)));
    lines
}

const MALFORMED: &[&str] = &[
    "",
    "status",
    "{",
    "{\"request\":",
    "[]",
    "null",
    "42",
    "{\"request\":\"no_such_request\"}",
    "{\"request\":\"limit_set\"}",
    "{\"request\":\"limit_set\",\"spec\":42}",
    "{\"request\":\"limit_set\",\"spec\":\"pid:1=banana\"}",
    "{\"request\":\"limit_set\",\"spec\":\"cgroup:/no/such/cgroup=1MiB\"}",
    "{\"request\":\"limit_clear\",\"target\":\"nonsense\"}",
    "\u{0}\u{1}\u{7f}",
];

/// A client of the control socket, reading one answer per line.
#[derive(Debug)]
struct Client {
    out: UnixStream,
    answers: BufReader<UnixStream>,
}

impl Client {
    fn connect(socket: &Path) -> Self {
        let out = UnixStream::connect(socket).expect("connecting to the control socket");
        out.set_read_timeout(Some(DEADLINE)).unwrap();
        let answers = BufReader::new(out.try_clone().unwrap());
        Self { out, answers }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.out.write_all(bytes).expect("writing to the control socket");
    }

    /// [`Self::send`] of a line the agent refuses before its end: it
    /// answers and closes as soon as the line is past its limit, so the
    /// rest of it may meet a closed connection.
    fn send_past_the_limit(&mut self, bytes: &[u8]) {
        match self.out.write_all(bytes) {
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {}
            other => other.expect("writing to the control socket"),
        }
    }

    /// The next answer; `None` when the agent closed the connection.
    fn answer(&mut self) -> Option<Response> {
        let mut line = String::new();
        let n = self.answers.read_line(&mut line).expect("reading the agent's answer");
        (n > 0).then(|| serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer `{line}`: {e}")))
    }

    fn error(&mut self) -> String {
        match self.answer() {
            Some(Response::Error(e)) => e,
            other => panic!("expected an error, the agent answered {other:?}"),
        }
    }
}

/// `clients` clients at once, each sending every malformed line `rounds`
/// times and reading an error for each.
fn flood(socket: &Path, clients: usize, rounds: usize) {
    let clients: Vec<_> = (0..clients)
        .map(|_| {
            let socket = socket.to_path_buf();
            let malformed = malformed();
            std::thread::spawn(move || {
                // Slots are freed as the agent sees earlier clients close:
                // a busy answer means connect again.
                let (mut client, _) = poll(
                    "a slot at the agent",
                    || {
                        let mut c = Client::connect(&socket);
                        c.send(b"{}\n");
                        let e = c.error();
                        (c, e)
                    },
                    |(_, e)| !e.contains("clients"),
                    String::new,
                );
                for _ in 0..rounds {
                    for line in &malformed {
                        client.send(format!("{line}\n").as_bytes());
                        let e = client.error();
                        assert!(!e.is_empty(), "an error says what is wrong with `{line}`");
                    }
                }
            })
        })
        .collect();
    for t in clients {
        t.join().expect("a flooding client");
    }
}

#[test]
fn a_flood_of_bad_requests_is_answered_with_errors_and_the_agent_goes_on() {
    if !privileged() {
        return;
    }
    let agent = Agent::start(&[]);
    let mut w = Workload::spawn(&["--scenario", "basic", "--pause"], None, &[]);
    let c = w.checkpoint();

    // Clients at the cap are served; one more is told why not, and closed.
    let mut held: Vec<Client> = (0..MAX_CLIENTS).map(|_| Client::connect(&agent.socket)).collect();
    for client in &mut held {
        client.send(b"not a request\n");
        assert!(client.error().contains("is not a request"));
    }
    let mut extra = Client::connect(&agent.socket);
    let busy = extra.error();
    assert!(busy.contains(&format!("serving {MAX_CLIENTS} clients")), "{busy}");
    assert!(extra.answer().is_none(), "a client beyond the cap is closed");
    drop(held);

    // Many clients at once, each sending every malformed line many times
    // (under the cap, as the held ones close): one error per line.
    flood(&agent.socket, MAX_CLIENTS / 2, 20);

    // Lines that end the conversation: too long, or not text. Each is
    // answered, then the connection closed.
    let mut long = Client::connect(&agent.socket);
    long.send_past_the_limit(&[vec![b'x'; MAX_LINE + 10], b"\n".to_vec()].concat());
    assert!(long.error().contains("unreadable request"));
    assert!(long.answer().is_none());
    let mut binary = Client::connect(&agent.socket);
    binary.send(b"\xff\xfe\xfd\n");
    assert!(binary.error().contains("unreadable request"));
    assert!(binary.answer().is_none());

    // The agent is unaffected: it answers status, and its numbers are the
    // workload's, exactly, through the rest of the workload.
    assert_process_holds(&agent.status(), c.pid, c.held);
    w.resume();
    let c = w.checkpoint();
    agent.wait_for_checkpoint(&c);
    assert_process_holds(&agent.status(), c.pid, c.held);
    w.run_to_end();
    agent.wait_for_exit(c.pid);
    assert_process_holds(&agent.status(), c.pid, 0);
    assert!(agent.stderr().lines().all(|l| !l.contains("panicked")), "{}", agent.stderr());
}
