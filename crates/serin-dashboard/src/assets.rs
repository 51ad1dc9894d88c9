//! The page and its script, style and icon, embedded in the binary: nothing is fetched from
//! another site, so the Content-Security-Policy can allow the dashboard's own origin alone.

use axum::body::Body;
use axum::extract::Path;
use axum::response::Response;
use http::{StatusCode, header};

const PAGE: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");
const ICON: &str = include_str!("../assets/icon.svg");

fn answer(content_type: &'static str, body: &'static str) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from(body))
        .unwrap_or_default()
}

/// Every page is the same document; its script draws the list, a Canary or the sign-in form by
/// the path.
pub async fn page() -> Response {
    answer("text/html; charset=utf-8", PAGE)
}

/// `/assets/<file>`.
pub async fn asset(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "app.js" => answer("text/javascript; charset=utf-8", SCRIPT),
        "app.css" => answer("text/css; charset=utf-8", STYLE),
        "icon.svg" => answer("image/svg+xml", ICON),
        _ => crate::guard::text(StatusCode::NOT_FOUND, "no such asset"),
    }
}
