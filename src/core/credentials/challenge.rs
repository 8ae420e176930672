//! What a 401's `WWW-Authenticate` header says about the token (RFC 6750
//! §3.1): `error="invalid_token"` is about the token (expired, revoked,
//! malformed); `invalid_request` and `insufficient_scope` are about the request
//! or the resource; without an `error` it could be either. Pure.

/// What a 401's `WWW-Authenticate` says (RFC 6750 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Challenge {
    /// `error="invalid_token"`: the token is expired, revoked or malformed.
    InvalidToken,
    /// `error="invalid_request"` or `"insufficient_scope"`: about the request
    /// or the resource, not the token's validity.
    NotTheToken,
    /// No header, no `error` (or one this client does not know): could be
    /// either.
    Unknown,
}

/// Reads a `WWW-Authenticate` value's `error` parameter (any scheme; the
/// first `error` found).
pub(crate) fn challenge(www_authenticate: Option<&[u8]>) -> Challenge {
    let Some(text) = www_authenticate.and_then(|v| std::str::from_utf8(v).ok()) else {
        return Challenge::Unknown;
    };
    match error_param(text).as_deref() {
        Some("invalid_token") => Challenge::InvalidToken,
        Some("invalid_request" | "insufficient_scope") => Challenge::NotTheToken,
        _ => Challenge::Unknown,
    }
}

/// The value of the first `error=` auth-param (quoted or a token), not
/// `error_description=` or `error_uri=`, and not inside a quoted value.
fn error_param(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut boundary = true;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // Skip a quoted value (with its escapes).
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                boundary = false;
                continue;
            }
            b' ' | b'\t' | b',' => {
                boundary = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        if boundary && b[i..].len() >= 5 && b[i..i + 5].eq_ignore_ascii_case(b"error") {
            let mut j = i + 5;
            while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                j += 1;
            }
            if j < b.len() && b[j] == b'=' {
                j += 1;
                while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                    j += 1;
                }
                let value = if b.get(j) == Some(&b'"') {
                    let end = text[j + 1..].find('"').map_or(b.len(), |e| j + 1 + e);
                    &text[j + 1..end]
                } else {
                    let end = text[j..].find([',', ' ', '\t']).map_or(b.len(), |e| j + e);
                    &text[j..end]
                };
                return Some(value.to_string());
            }
        }
        boundary = false;
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_names_the_error_whatever_its_form() {
        let c = |s: &str| challenge(Some(s.as_bytes()));
        assert_eq!(
            c(
                r#"Bearer realm="api", error="invalid_token", error_description="The access token expired""#
            ),
            Challenge::InvalidToken
        );
        assert_eq!(c("Bearer error=invalid_token"), Challenge::InvalidToken);
        assert_eq!(
            c(r#"Bearer ERROR = "insufficient_scope""#),
            Challenge::NotTheToken
        );
        assert_eq!(
            c(r#"Basic realm="x", Bearer error="invalid_request""#),
            Challenge::NotTheToken
        );
        // Not the `error` parameter: a description, a quoted text, none at all.
        assert_eq!(
            c(r#"Bearer error_description="error=invalid_token""#),
            Challenge::Unknown
        );
        assert_eq!(
            c(r#"Bearer realm="error=insufficient_scope""#),
            Challenge::Unknown
        );
        assert_eq!(c(r#"Bearer realm="api""#), Challenge::Unknown);
        assert_eq!(c(r#"Bearer error="something_else""#), Challenge::Unknown);
        assert_eq!(c(r#"Bearer error=""#), Challenge::Unknown);
        assert_eq!(challenge(None), Challenge::Unknown);
        assert_eq!(
            challenge(Some(b"\xff error=invalid_token")),
            Challenge::Unknown
        );
    }
}
