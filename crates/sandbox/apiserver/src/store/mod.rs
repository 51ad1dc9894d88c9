//! The object store: every object as JSON, one global resourceVersion, a retained history of
//! changes for watches, and the write rules of the API server (generation, status subresource,
//! finalizers, namespaces, garbage collection, CRD registration).

mod collect;
mod read;
mod state;
mod types;
mod write;

pub use state::*;
pub use types::*;
