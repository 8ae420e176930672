//! The limiter's Redis side: the two scripts (the batch GCRA and the group's
//! pause), loaded once and called by SHA, and what their answers mean.

use super::*;

/// A wait Redis answered, in µs, capped at [`MAX_PAUSE`]: whatever the keys
/// or the Redis host's clock say, one answer never holds a caller longer (the
/// script is asked again after it).
pub fn capped_wait_us(wait_us: i64) -> u64 {
    (wait_us.max(0) as u64).min(MAX_PAUSE.as_micros() as u64)
}

/// GCRA in Redis: `KEYS` = TAT, not-before, members; `ARGV` = interval µs,
/// tolerance µs, batch, member, member TTL ms, resume (0/1), the longest
/// pause ms ([`MAX_PAUSE`]). Returns `{granted, wait_us, live, distrusted}`.
/// Mirrors [`Gcra::take`].
///
/// Neither key can stall the group: a not-before without a TTL, with a TTL
/// above the longest pause, or further ahead than it (a clock stepped back on
/// the Redis host, a key written by hand) is deleted and ignored (bit 1 of
/// `distrusted`); a TAT without a TTL or further ahead than this limiter
/// could have put it (twice `tolerance + interval`, and a second) is ignored
/// (bit 2) and rewritten from now.
pub const ACQUIRE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ttl_ms = tonumber(ARGV[5])
local max_pause_ms = tonumber(ARGV[7])
local distrusted = 0
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl_ms * 1000)
redis.call('PEXPIRE', KEYS[3], ttl_ms)
local live = redis.call('ZCARD', KEYS[3])
local nb = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if nb > now then
  local pttl = redis.call('PTTL', KEYS[2])
  if pttl == -1 or pttl > max_pause_ms or nb - now > max_pause_ms * 1000 then
    redis.call('DEL', KEYS[2])
    distrusted = distrusted + 1
  else
    return {0, nb - now, live, distrusted}
  end
end
local T = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat > now and (redis.call('PTTL', KEYS[1]) == -1 or tat - now > 2 * (tau + T) + 1000000) then
  tat = now
  distrusted = distrusted + 2
end
if tat < now then tat = now end
if ARGV[6] == '1' and tat < now + tau then tat = now + tau end
local ahead = tat - now
if ahead > tau then
  return {0, ahead - tau, live, distrusted}
end
local k = math.floor((tau - ahead) / T) + 1
if k > n then k = n end
tat = tat + k * T
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return {k, 0, live, distrusted}
"#;

/// Raises the group's "not before" to Redis time + `ARGV[1]` ms (never lowers
/// it).
pub const PAUSE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ms = tonumber(ARGV[1])
local until_us = now + ms * 1000
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_us > cur then
  redis.call('SET', KEYS[1], string.format('%d', until_us), 'PX', ms)
end
return 1
"#;

impl RateLimiter {
    /// The scripts' SHA-1s, loaded once (and again after a `NOSCRIPT`).
    pub(super) async fn shas(
        &self,
        client: &Client,
        reload: bool,
    ) -> Result<(String, String), Error> {
        if !reload {
            if let Some(s) = self
                .shared
                .scripts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Ok(s);
            }
        }
        let a: String = client.script_load(ACQUIRE_LUA).await?;
        let p: String = client.script_load(PAUSE_LUA).await?;
        let shas = (a, p);
        *self
            .shared
            .scripts
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(shas.clone());
        Ok(shas)
    }

    pub(super) async fn evalsha(
        &self,
        client: &Client,
        pause: bool,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Vec<i64>, Error> {
        let mut reload = false;
        loop {
            let (acquire, pause_sha) = self.shas(client, reload).await?;
            let sha = if pause { pause_sha } else { acquire };
            match client
                .evalsha::<Value, _, _, _>(sha, keys.clone(), args.clone())
                .await
            {
                Err(e) if !reload && e.details().starts_with("NOSCRIPT") => reload = true,
                Err(e) => return Err(e),
                Ok(Value::Array(v)) => return Ok(v.iter().filter_map(|x| x.as_i64()).collect()),
                Ok(v) => return Ok(v.as_i64().into_iter().collect()),
            }
        }
    }

    /// One script call: `(granted, wait_us, live)` for a batch, `resume` after
    /// a fallback.
    pub async fn take_batch(
        &self,
        client: &Client,
        resume: bool,
    ) -> Result<(u64, u64, u64), Error> {
        let args = vec![
            self.gcra.interval_us.to_string(),
            self.gcra.tolerance_us.to_string(),
            self.batch.to_string(),
            self.shared.member.clone(),
            MEMBER_TTL.as_millis().to_string(),
            if resume { "1" } else { "0" }.to_string(),
            MAX_PAUSE.as_millis().to_string(),
        ];
        let v = self
            .evalsha(client, false, self.shared.keys.to_vec(), args)
            .await?;
        match v.as_slice() {
            [k, w, l, distrusted] => {
                if *distrusted != 0 {
                    self.distrusted(*distrusted);
                }
                Ok(((*k).max(0) as u64, capped_wait_us(*w), (*l).max(0) as u64))
            }
            _ => Err(Error::new(
                ErrorKind::Parse,
                "rate-limit script: unexpected answer",
            )),
        }
    }

    /// The script found a key it does not trust (logged at most once a
    /// minute: every batch of every instance would see it).
    pub(super) fn distrusted(&self, bits: i64) {
        static GATE: crate::redis_conn::LogGate = crate::redis_conn::LogGate::new();
        if GATE.allow(crate::redis_conn::STALE_KEY_LOG_EVERY) {
            let which = match bits {
                1 => "the group's pause (not-before)",
                2 => "the shared TAT",
                _ => "the group's pause and the shared TAT",
            };
            tracing::warn!(
                keys = ?self.shared.keys,
                which,
                "rate limit: a key in Redis had no TTL or was further ahead than Courier ever sets it (written by hand, or the Redis host's clock stepped): ignored and reset, the limit goes on from now"
            );
        }
    }

    /// A 429 or 503 with `Retry-After`: this instance stops at once, and the
    /// group through Redis (capped at [`MAX_PAUSE`]).
    pub fn pause_group(self: &Arc<Self>, after: Duration) {
        let after = after.min(MAX_PAUSE);
        if after.is_zero() {
            return;
        }
        let until = self.epoch.elapsed().as_millis() as u64 + after.as_millis() as u64;
        if self.paused_until_ms.fetch_max(until, Relaxed) >= until {
            return; // Already paused at least this long: the group knows.
        }
        tracing::info!(
            pause_ms = after.as_millis() as u64,
            "API asked to slow down (Retry-After): the group pauses"
        );
        let Some(client) = self.shared.redis.clone() else {
            return;
        };
        let me = self.clone();
        tokio::spawn(async move {
            let keys = vec![me.shared.keys[1].clone()];
            let args = vec![after.as_millis().to_string()];
            if let Err(e) = me.evalsha(&client, true, keys, args).await {
                tracing::warn!(error = %e, "rate limit: could not share the pause through Redis; only this instance pauses");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_waits_are_capped() {
        assert_eq!(capped_wait_us(0), 0);
        assert_eq!(capped_wait_us(-5), 0);
        assert_eq!(capped_wait_us(1_500), 1_500);
        let max = MAX_PAUSE.as_micros() as u64;
        assert_eq!(capped_wait_us(3_600_000_000), max);
        assert_eq!(capped_wait_us(i64::MAX), max);
    }
}
