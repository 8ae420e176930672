//! Standard Webhooks signatures (the specification Svix, Convoy and Outpost
//! follow): `webhook-signature` = space-separated `v1,<base64 HMAC-SHA256(key,
//! "{id}.{timestamp}.{body}")>`, one per secret, where a secret is `whsec_`
//! followed by the base64 of its key. Pure: the timestamp is an input.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The prefix of a Standard Webhooks secret.
pub(crate) const SECRET_PREFIX: &str = "whsec_";

/// The shortest key accepted (the specification asks for 24 to 64 bytes).
pub(crate) const MIN_KEY_BYTES: usize = 24;
pub(crate) const MAX_KEY_BYTES: usize = 64;

/// Why a signing secret is refused. Never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SecretError {
    #[error("holds no secret")]
    Empty,
    #[error("secret {0} does not start with whsec_")]
    Prefix(usize),
    #[error("secret {0} is not base64 after whsec_")]
    Base64(usize),
    #[error("secret {0} has a key of {1} bytes (Standard Webhooks keys are 24 to 64 bytes)")]
    Length(usize, usize),
}

/// The keys of a signing secret value: one or more `whsec_…` secrets separated
/// by whitespace (two during a rotation: every request is signed with each).
/// Errors number the secrets from 1.
pub(crate) fn parse_secrets(value: &str) -> Result<Vec<Vec<u8>>, SecretError> {
    let mut keys = Vec::new();
    for (i, s) in value.split_whitespace().enumerate() {
        let n = i + 1;
        let b64 = s
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::Prefix(n))?;
        let key = STANDARD.decode(b64).map_err(|_| SecretError::Base64(n))?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(n, key.len()));
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(SecretError::Empty);
    }
    Ok(keys)
}

/// The `webhook-signature` header value: `v1,<sig>` for each key, in order,
/// separated by one space.
pub(crate) fn signature(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let prefix = format!("{id}.{timestamp}.");
    let mut out = String::with_capacity(keys.len() * 48);
    for (i, key) in keys.iter().enumerate() {
        let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&k);
        ctx.update(prefix.as_bytes());
        ctx.update(body);
        if i > 0 {
            out.push(' ');
        }
        out.push_str("v1,");
        STANDARD.encode_string(ctx.sign().as_ref(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The example of the Standard Webhooks specification's test vectors
    // (standard-webhooks/standard-webhooks, libraries' shared test case).
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1614265330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIG: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_specifications_example_signs_as_published() {
        let keys = parse_secrets(SPEC_SECRET).expect("the spec's secret");
        assert_eq!(signature(&keys, SPEC_ID, SPEC_TS, SPEC_BODY), SPEC_SIG);
    }

    #[test]
    fn two_secrets_sign_twice_in_order() {
        let other = format!("whsec_{}", STANDARD.encode([7u8; 32]));
        let keys = parse_secrets(&format!("{SPEC_SECRET}\n  {other}\n")).expect("two");
        assert_eq!(keys.len(), 2);
        let sig = signature(&keys, SPEC_ID, SPEC_TS, SPEC_BODY);
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], SPEC_SIG);
        assert_ne!(parts[1], SPEC_SIG);
        assert!(parts[1].starts_with("v1,"));
    }

    #[test]
    fn a_malformed_secret_is_refused_with_its_position() {
        assert_eq!(parse_secrets("  \n"), Err(SecretError::Empty));
        assert_eq!(
            parse_secrets(&format!("{SPEC_SECRET} sk_live_x")),
            Err(SecretError::Prefix(2))
        );
        assert_eq!(
            parse_secrets("whsec_not*base64"),
            Err(SecretError::Base64(1))
        );
        let short = format!("whsec_{}", STANDARD.encode([1u8; 8]));
        assert_eq!(parse_secrets(&short), Err(SecretError::Length(1, 8)));
        // The error's text never holds the secret.
        let e = parse_secrets("whsec_c2VjcmV0LXZhbHVl")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("c2VjcmV0"), "{e}");
    }
}
