//! The typed-index request context map.
