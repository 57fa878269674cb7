//! The programs' diagnostic log (`gpumem run --bpf-log`, see gpumem-ebpf's
//! base/log.rs): read from aya-log's ring buffer and said through the
//! agent's own messages, `gpumem: bpf: ...`.
use aya::Ebpf;
use aya_log::EbpfLogger;

use super::error::BpfError;

/// aya-log's level in the logging object: decisions and problems.
pub const LEVEL: u8 = aya_log::Level::Info as u8;

/// The log's reader.
pub struct BpfLog(EbpfLogger<Forward>);

impl BpfLog {
    /// Takes aya-log's ring buffer out of the object.
    pub fn take(ebpf: &mut Ebpf) -> Result<Self, BpfError> {
        EbpfLogger::init_with_logger(ebpf, Forward).map(Self).map_err(|e| BpfError::Log(Box::new(e)))
    }

    /// Says every log record waiting. A record aya-log cannot read (it
    /// panics on one) is dropped, said once, and the agent goes on.
    pub fn drain(&mut self) {
        let inner = &mut self.0;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.flush())).is_err() {
            tracing::warn!("bpf: a log record could not be read; later ones still are");
        }
    }
}

/// Forwards aya-log's records to the agent's messages.
pub struct Forward;

impl log::Log for Forward {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        match record.level() {
            log::Level::Error | log::Level::Warn => tracing::warn!("bpf: {}", record.args()),
            _ => tracing::info!("bpf: {}", record.args()),
        }
    }

    fn flush(&self) {}
}
