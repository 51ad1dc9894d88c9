//! The HTTP front of the sandbox: URL grammar, verbs, subresources and watch streams.

mod body;
mod pods;
mod request;
mod routes;
mod target;
mod verbs;
mod watch;

pub use request::*;
pub use routes::*;
