//! What the agent says on stderr: one line per message, `gpumem: ` and the
//! message, through `tracing` (the level shows only for warnings and
//! errors). Tests and scripts read some of these lines (`gpumem: ready`).
use std::fmt;

use tracing::{field::Visit, Event, Level, Subscriber};
use tracing_subscriber::{
    fmt::{format::Writer, FmtContext, FormatEvent, FormatFields},
    registry::LookupSpan,
};

/// Formats an event as `gpumem: [warning: ]MESSAGE key=value...`.
pub struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        writeln!(w, "gpumem: {level}{}{}", fields.message, fields.rest)
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

/// Sends the agent's messages to stderr; `GPUMEM_LOG` (a `tracing` filter
/// such as `debug`) says how much, `info` unless set.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUMEM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .event_format(Plain)
        .try_init();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn messages_are_plain_lines_readers_can_wait_for() {
        let buf = Buffer::default();
        let out = buf.clone();
        let subscriber =
            tracing_subscriber::fmt().with_writer(move || out.clone()).event_format(Plain).finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("ready");
            tracing::warn!(slot = 3, "limit base not written");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, [crate::cmd::run::READY, "gpumem: warning: limit base not written slot=3"]);
    }
}
