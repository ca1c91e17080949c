//! dormant: an HTTP/1.1 + HTTP/2 server whose idle connections cost almost nothing.

pub mod context;
