//! `WebSocketUpgrade` as an axum extractor (features `ws` and `axum`): an
//! axum handler takes dormant's in place of axum's, and answers with
//! [`on_message`](super::WebSocketUpgrade::on_message) where it answered
//! with `on_upgrade`.

use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use http::request::Parts;

use super::{Accepted, Rejection, WebSocketUpgrade, check};

impl<S: Sync> FromRequestParts<S> for WebSocketUpgrade {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Rejection> {
        let offered = check(
            &parts.method,
            parts.version,
            &parts.headers,
            &parts.extensions,
        )?;
        WebSocketUpgrade::new(offered, &mut parts.extensions, parts.version)
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut response = self.response::<axum::body::Body>();
        *response.body_mut() = axum::body::Body::from(self.to_string());
        response
    }
}

impl IntoResponse for Accepted {
    fn into_response(self) -> Response {
        Accepted::into_response(self)
    }
}
