//! `courier`'s exit codes: the one list. `main` ends every command with one of
//! these, and the guide's table (docs/guide/src/operating.md, "Exit codes") is
//! [`table`]'s text, checked by the guide test (`main/guide_tests.rs`).

/// How a `courier` command ended ([`Exit::meaning`] says when each is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Ok,
    No,
    Failed,
    NotReplayable,
    Restart,
    Interrupted,
}

impl Exit {
    /// Every exit code, in order (for the guide's table: the test build's).
    #[cfg(test)]
    pub(crate) const ALL: [Exit; 6] = [
        Exit::Ok,
        Exit::No,
        Exit::Failed,
        Exit::NotReplayable,
        Exit::Restart,
        Exit::Interrupted,
    ];

    /// The number the process exits with.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::No => 1,
            Exit::Failed => 2,
            Exit::NotReplayable => 3,
            Exit::Restart => 70,
            Exit::Interrupted => 130,
        }
    }

    /// What it means, as the guide's table says it.
    #[cfg(test)]
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "done; `run` stopped by SIGTERM or SIGINT after its drain",
            Exit::No => {
                "answered no: `healthcheck` found the instance unhealthy (or not ready), \
                 `dlq replay` was declined at its prompt, `demo`'s audit found events lost, \
                 `expr eval` found an expression that fails for the event"
            }
            Exit::Failed => {
                "refused or failed: a bad configuration (the message names the field and \
                 the reason), a start-up check (a missing topic, a DLQ partition count unlike \
                 the main topic's, an unreadable CA file, brokers that cannot be reached), a \
                 problem `check-config --online` found, a command line that cannot be read, \
                 an operator command that could not finish (`dlq` without a broker)"
            }
            Exit::NotReplayable => {
                "`dlq replay` wrote what it could, but some events' payloads are no longer \
                 in the origin topic (retention removed them): it names each one"
            }
            Exit::Restart => {
                "`run` gave up so that the orchestrator restarts it: a restart budget spent \
                 (`supervision.*`), a fenced static member, a consumer stuck outside its \
                 group (10 min or more with a broker up), a panic on the poll thread, a \
                 partition count that changed while it ran"
            }
            Exit::Interrupted => {
                "`dlq replay` or `dlq inspect` stopped by Ctrl-C (128 + SIGINT), after the \
                 summary of what it did (a replay: the same command again replays the rest)"
            }
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

/// The guide's table of exit codes (Markdown).
#[cfg(test)]
pub(crate) fn table() -> String {
    let mut out = String::from("| code | meaning |\n|---:|---|\n");
    for e in Exit::ALL {
        out.push_str(&format!("| {} | {} |\n", e.code(), e.meaning()));
    }
    out
}
