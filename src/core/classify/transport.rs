//! [`TransportFailure`]: a call that got no HTTP status, by reason.

use super::FailureClass;

/// Failures that happen before an HTTP status exists, each with its reason code
/// (`as_str`: in the log, in `courier_delivery_errors_total{reason}` and in the
/// DLQ envelope's `last_error.reason`).
///
/// TLS failures are *systemic*: a certificate the API's name cannot be trusted
/// with, or a client certificate the API refuses, is wrong for every event
/// alike and stays wrong until someone changes a certificate or the config. The
/// rest are *transient*: the API or the network may be back on the next try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportFailure {
    /// The host name did not resolve.
    Dns,
    /// Nothing listens at the address (TCP RST).
    ConnectRefused,
    /// No connection within `api.connect_timeout`.
    ConnectTimeout,
    /// Another failure while connecting (network unreachable, ...).
    Connect,
    /// No answer within `api.request_timeout`.
    Timeout,
    /// The connection was closed or reset before the answer.
    ConnectionClosed,
    /// The answer was not valid HTTP.
    Protocol,
    /// The API's certificate does not chain to a trusted root.
    TlsUntrusted,
    /// The API's certificate has expired.
    TlsExpired,
    /// The API's certificate is not valid yet.
    TlsNotYetValid,
    /// The API's certificate is not for the URL's host name.
    TlsHostname,
    /// The API's certificate was revoked.
    TlsRevoked,
    /// The API refused our client certificate, or wanted one.
    TlsClientCert,
    /// Any other TLS failure (versions, ciphers, not TLS at all on this port).
    TlsHandshake,
    /// The request could not even be built here (a header value the HTTP stack
    /// refuses, say): the event's fault, not the API's — *permanent*, parked at
    /// once, and never fed to the breaker.
    Request,
    /// Anything else before an answer.
    Other,
    /// No OAuth2 access token to send: the token endpoint could not be asked
    /// or gave no usable answer. *Systemic* (the group pauses at the breaker,
    /// never parks), and fed to the breaker like an answer of the API.
    AuthTokenUnavailable,
    /// The token endpoint refused the client's credentials. *Systemic*.
    AuthTokenRefused,
}

impl TransportFailure {
    pub(crate) const ALL: [TransportFailure; 18] = [
        TransportFailure::Dns,
        TransportFailure::ConnectRefused,
        TransportFailure::ConnectTimeout,
        TransportFailure::Connect,
        TransportFailure::Timeout,
        TransportFailure::ConnectionClosed,
        TransportFailure::Protocol,
        TransportFailure::TlsUntrusted,
        TransportFailure::TlsExpired,
        TransportFailure::TlsNotYetValid,
        TransportFailure::TlsHostname,
        TransportFailure::TlsRevoked,
        TransportFailure::TlsClientCert,
        TransportFailure::TlsHandshake,
        TransportFailure::Request,
        TransportFailure::Other,
        TransportFailure::AuthTokenUnavailable,
        TransportFailure::AuthTokenRefused,
    ];

    pub(crate) fn class(self) -> FailureClass {
        if self.is_tls() || self.is_auth() {
            FailureClass::Systemic
        } else if self == TransportFailure::Request {
            FailureClass::Permanent
        } else {
            FailureClass::Transient
        }
    }

    /// Whether the API was reached at all: a request that failed to build here
    /// says nothing about the API, so the breaker does not hear of it.
    pub(crate) fn reached_the_api(self) -> bool {
        self != TransportFailure::Request
    }

    /// No credential to send (`auth_token_*`): never the event's fault, so
    /// never counted against it (`core::systemic`'s hypothesis is not kept).
    pub(crate) fn is_auth(self) -> bool {
        matches!(
            self,
            TransportFailure::AuthTokenUnavailable | TransportFailure::AuthTokenRefused
        )
    }

    pub(crate) fn is_tls(self) -> bool {
        use TransportFailure::*;
        matches!(
            self,
            TlsUntrusted
                | TlsExpired
                | TlsNotYetValid
                | TlsHostname
                | TlsRevoked
                | TlsClientCert
                | TlsHandshake
        )
    }

    pub fn as_str(self) -> &'static str {
        use TransportFailure::*;
        match self {
            Dns => "dns",
            ConnectRefused => "connect_refused",
            ConnectTimeout => "connect_timeout",
            Connect => "connect",
            Timeout => "timeout",
            ConnectionClosed => "connection_closed",
            Protocol => "protocol",
            TlsUntrusted => "tls_untrusted",
            TlsExpired => "tls_expired",
            TlsNotYetValid => "tls_not_yet_valid",
            TlsHostname => "tls_hostname",
            TlsRevoked => "tls_revoked",
            TlsClientCert => "tls_client_cert",
            TlsHandshake => "tls_handshake",
            Request => "request_unbuildable",
            Other => "transport",
            AuthTokenUnavailable => "auth_token_unavailable",
            AuthTokenRefused => "auth_token_refused",
        }
    }

    /// What failed and what to do, for the log line.
    pub(crate) fn hint(self) -> &'static str {
        use TransportFailure::*;
        match self {
            Dns => "the API's host name does not resolve: check api.url and the DNS",
            ConnectRefused => {
                "nothing listens at api.url's host and port: the API is down or the port is wrong"
            }
            ConnectTimeout => {
                "no connection to the API within api.connect_timeout: network, firewall or an overloaded API"
            }
            Connect => "the connection to the API could not be set up",
            Timeout => "the API did not answer within api.request_timeout",
            ConnectionClosed => "the API closed the connection before answering",
            Protocol => "the API's answer was not valid HTTP",
            Request => {
                "the request for this event could not be built (a header value the HTTP stack refuses): the event is parked"
            }
            TlsUntrusted => {
                "the API's certificate is not signed by a CA Courier trusts: set api.tls.ca_file \
                 to the CA that signed it"
            }
            TlsExpired => {
                "the API's certificate has expired (or this machine's clock is wrong): the API \
                 must renew it"
            }
            TlsNotYetValid => {
                "the API's certificate is not valid yet: check this machine's and the API's clocks"
            }
            TlsHostname => {
                "the API's certificate is not for api.url's host name: fix the host in api.url \
                 or the API's certificate"
            }
            TlsRevoked => "the API's certificate was revoked: the API must replace it",
            TlsClientCert => {
                "the API refused Courier's client certificate, or wanted one: set \
                 api.tls.cert_file and api.tls.key_file to a certificate the API accepts"
            }
            TlsHandshake => {
                "the TLS handshake with the API failed: TLS versions or ciphers in common, or \
                 the port does not speak TLS"
            }
            Other => "the request failed before an answer",
            AuthTokenUnavailable => {
                "no OAuth2 access token: api.oauth2.token_url cannot be reached or gives no \
                 token; calls wait until it does"
            }
            AuthTokenRefused => {
                "the OAuth2 token endpoint refuses Courier's client credentials: check \
                 api.oauth2.client_id and the client secret; calls wait until it accepts them"
            }
        }
    }
}
