//! Test certificates made with `rcgen`: a CA, server certificates for
//! 127.0.0.1/localhost (valid, expired, for another host name), a client
//! certificate, written as PEM files into a directory of the test's own.
//! Shared with the HTTPS benchmark (`benches/e2e/main.rs` includes this file).
#![allow(dead_code)]

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate and its key, as PEM, and where they were written.
pub(crate) struct Pem {
    pub cert: String,
    pub key: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// A certificate authority that signs the others.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: Pem,
    dir: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    p
}

/// Validity of a leaf certificate.
#[derive(Clone, Copy)]
pub(crate) enum Validity {
    /// Valid now (rcgen's default validity, 1975-4096).
    Current,
    /// Expired years ago (2000-2001).
    Expired,
}

impl Ca {
    /// A new CA named `name`; its files go to `dir/<name>-ca.pem` (and `-ca.key`).
    pub(crate) fn new(dir: &Path, name: &str) -> Ca {
        std::fs::create_dir_all(dir).expect("certificate directory");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Courier test CA {name}"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let key_pem = key.serialize_pem();
        let issuer = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let cert = issuer.pem();
        let pem = Pem {
            cert_file: write(dir, &format!("{name}-ca.pem"), &cert),
            key_file: write(dir, &format!("{name}-ca.key"), &key_pem),
            cert,
            key: key_pem,
        };
        Ca {
            issuer,
            pem,
            dir: dir.to_path_buf(),
        }
    }

    fn leaf(&self, file: &str, names: &[&str], validity: Validity, client: bool) -> Pem {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("leaf params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        match validity {
            // rcgen's default: 1975 to 4096.
            Validity::Current => {}
            Validity::Expired => {
                params.not_before = rcgen::date_time_ymd(2000, 1, 1);
                params.not_after = rcgen::date_time_ymd(2001, 1, 1);
            }
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign").pem();
        let key = key.serialize_pem();
        Pem {
            cert_file: write(&self.dir, &format!("{file}.pem"), &cert),
            key_file: write(&self.dir, &format!("{file}.key"), &key),
            cert,
            key,
        }
    }

    /// A server certificate for `names` (IP addresses become IP SANs).
    pub(crate) fn server(&self, file: &str, names: &[&str], validity: Validity) -> Pem {
        self.leaf(file, names, validity, false)
    }

    /// A client certificate (for mTLS) with common name `name`.
    pub(crate) fn client(&self, file: &str, name: &str) -> Pem {
        self.leaf(file, &[name], Validity::Current, true)
    }
}

/// The names a stand-in on loopback is reached by.
pub(crate) const LOOPBACK: &[&str] = &["127.0.0.1", "localhost"];
