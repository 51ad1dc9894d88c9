//! A small structured logger: one JSON object per line on stderr, as Flagger's load tester writes
//! with its default `-zap-encoding json`. Tests capture the lines instead of printing them.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// How much the load tester logs; each level includes the ones after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything, including each gate check.
    Debug,
    /// Tasks started, finished and skipped, gate changes.
    Info,
    /// Refused requests and failed commands.
    Warn,
    /// Only errors of the service itself.
    Error,
}

impl LogLevel {
    fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "debug" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" | "warning" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            _ => Err(format!(
                "unknown log level `{text}`; expected debug, info, warn or error"
            )),
        }
    }
}

/// Where log lines go: stderr, or a buffer that tests read back.
#[derive(Clone)]
pub struct Logger {
    level: LogLevel,
    captured: Option<Arc<Mutex<Vec<String>>>>,
}

impl Logger {
    /// A logger writing lines at `level` and above to stderr.
    pub fn stderr(level: LogLevel) -> Self {
        Logger {
            level,
            captured: None,
        }
    }

    /// A logger keeping every line at `level` and above in memory; see [`Logger::lines`].
    pub fn capture(level: LogLevel) -> Self {
        Logger {
            level,
            captured: Some(Arc::default()),
        }
    }

    /// The lines a capturing logger kept so far (empty for a stderr logger).
    pub fn lines(&self) -> Vec<String> {
        match &self.captured {
            Some(lines) => lines.lock().unwrap().clone(),
            None => Vec::new(),
        }
    }

    /// Whether a message at `level` would be written.
    pub fn enabled(&self, level: LogLevel) -> bool {
        level >= self.level
    }

    /// Writes `message` with extra string fields, if `level` is enabled.
    pub fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]) {
        if !self.enabled(level) {
            return;
        }
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs_f64())
            .unwrap_or_default();
        let mut line = serde_json::Map::new();
        line.insert("level".into(), level.name().into());
        line.insert("ts".into(), timestamp.into());
        line.insert("msg".into(), message.into());
        for (key, value) in fields {
            line.insert((*key).into(), (*value).into());
        }
        let line = serde_json::Value::Object(line).to_string();
        match &self.captured {
            Some(lines) => lines.lock().unwrap().push(line),
            None => eprintln!("{line}"),
        }
    }

    /// Logs at debug level.
    pub fn debug(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(LogLevel::Debug, message, fields)
    }

    /// Logs at info level.
    pub fn info(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(LogLevel::Info, message, fields)
    }

    /// Logs at warn level.
    pub fn warn(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(LogLevel::Warn, message, fields)
    }
}
