//! HTTP response bodies read up to a cap: a peer (a model server, a
//! bridge's callback endpoint) that answers with an endless or enormous body
//! costs at most the cap in memory, and the call fails with a clear reason.

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the response is larger than {cap} bytes")]
    TooLarge { cap: usize },
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

impl BodyError {
    pub fn is_timeout(&self) -> bool {
        matches!(self, BodyError::Http(e) if e.is_timeout())
    }
}

/// Reads the whole body, refusing one over `cap` bytes: at once when its
/// `Content-Length` says so, else as soon as the bytes read pass the cap.
pub async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|len| len > cap as u64) {
        return Err(BodyError::TooLarge { cap });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Err(BodyError::TooLarge { cap });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of a body for an error message: at most `cap` bytes are read,
/// the rest is left unread.
pub async fn snippet(mut response: reqwest::Response, cap: usize) -> String {
    let mut body = Vec::new();
    while body.len() < cap {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(cap - body.len())]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}
