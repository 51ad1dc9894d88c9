//! Serin decision core.
