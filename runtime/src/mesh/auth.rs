//! Proving the security identity in the admission handshake (wire §4).
//!
//! The vendored libzmq has no CURVE, so a peer's identity cannot come from the transport. Both
//! sides instead prove knowledge of the **mesh secret** (a Kubernetes Secret mounted as a file
//! or passed in an environment variable) with HMAC-SHA256 over fresh nonces from both sides
//! and the identity being claimed:
//!
//! 1. The acceptor greets a new connection with a random challenge `n_a` (transport header).
//! 2. The dialer sends `hello` with its own nonce `n_d` and
//!    `proof = HMAC(secret, "zlink-hello-v1" ‖ n_a ‖ n_d ‖ identity(dialer descriptor))`.
//! 3. The acceptor checks the proof (constant time) and answers `admit` carrying `n_a` and
//!    `proof = HMAC(secret, "zlink-admit-v1" ‖ n_d ‖ n_a ‖ identity(acceptor) ‖ generation)`,
//!    which the dialer checks before it treats the connection as admitted.
//!
//! Each proof binds both nonces (no replay across connections), the direction label (a hello
//! proof is never a valid admit proof) and the identity fields (MeshName, RID, lifecycle
//! generation, object role, security identity, capability, application version), so none of
//! them can be altered in transit. What this does **not** give is confidentiality: records
//! travel in clear text, and encryption in transit is left to the network layer (a service
//! mesh's mTLS or an encrypting CNI) — see `docs/architecture.md`.

use ring::hmac;
use thiserror::Error;

use zlink_protocol::generated::NodeDescriptor;

/// The shared mesh secret. Debug output never shows it.
#[derive(Clone)]
pub struct MeshSecret {
    key: hmac::Key,
}

impl std::fmt::Debug for MeshSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeshSecret(..)")
    }
}

/// Minimum secret length in bytes.
pub const MIN_SECRET_LEN: usize = 16;

/// A mesh secret could not be loaded.
#[derive(Debug, Error)]
pub enum SecretError {
    /// Shorter than [`MIN_SECRET_LEN`] bytes (after trimming a trailing newline).
    #[error("mesh secret is {0} bytes; at least {MIN_SECRET_LEN} are required")]
    TooShort(usize),
    /// The file could not be read.
    #[error("mesh secret file {path}: {source}")]
    File {
        /// The path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The environment variable is missing or not UTF-8.
    #[error("mesh secret environment variable {0} is not set")]
    MissingEnv(String),
}

impl MeshSecret {
    /// A secret from raw bytes.
    ///
    /// # Errors
    /// [`SecretError::TooShort`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SecretError> {
        let trimmed = trim_newline(bytes);
        if trimmed.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort(trimmed.len()));
        }
        Ok(Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, trimmed),
        })
    }

    /// A secret read from a file (e.g. a mounted Kubernetes Secret); one trailing newline is
    /// ignored.
    ///
    /// # Errors
    /// [`SecretError::File`] or [`SecretError::TooShort`].
    pub fn from_file(path: &std::path::Path) -> Result<Self, SecretError> {
        let bytes = std::fs::read(path).map_err(|source| SecretError::File {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_bytes(&bytes)
    }

    /// A secret from an environment variable.
    ///
    /// # Errors
    /// [`SecretError::MissingEnv`] or [`SecretError::TooShort`].
    pub fn from_env(var: &str) -> Result<Self, SecretError> {
        let v = std::env::var(var).map_err(|_| SecretError::MissingEnv(var.to_owned()))?;
        Self::from_bytes(v.as_bytes())
    }

    fn message(parts: &[&[u8]]) -> Vec<u8> {
        let mut msg = Vec::with_capacity(256);
        for p in parts {
            // Length-prefix every part so concatenations cannot collide.
            msg.extend_from_slice(&(p.len() as u64).to_be_bytes());
            msg.extend_from_slice(p);
        }
        msg
    }

    fn tag(&self, msg: &[u8]) -> [u8; 32] {
        let tag = hmac::sign(&self.key, msg);
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    fn verify(&self, msg: &[u8], proof: &[u8; 32]) -> bool {
        // ring compares in constant time.
        hmac::verify(&self.key, msg, proof).is_ok()
    }

    fn hello_message(
        acceptor_nonce: &[u8; 32],
        dialer_nonce: &[u8; 32],
        dialer: &NodeDescriptor,
        capability: &str,
    ) -> Vec<u8> {
        let id = identity_bytes(dialer, capability);
        Self::message(&[b"zlink-hello-v1", acceptor_nonce, dialer_nonce, &id])
    }

    fn admit_message(
        dialer_nonce: &[u8; 32],
        acceptor_nonce: &[u8; 32],
        acceptor: &NodeDescriptor,
        capability: &str,
        connection_generation: u64,
    ) -> Vec<u8> {
        let id = identity_bytes(acceptor, capability);
        Self::message(&[
            b"zlink-admit-v1",
            dialer_nonce,
            acceptor_nonce,
            &id,
            &connection_generation.to_be_bytes(),
        ])
    }

    /// An HMAC over length-prefixed `parts` (the first part is the proof's label). For
    /// proofs of other topologies (ClientServer's `zlink-cs-hello-v1`/`zlink-cs-admit-v1`,
    /// see `clientserver::admission`).
    pub fn proof_over(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.tag(&Self::message(parts))
    }

    /// Check a [`proof_over`](Self::proof_over) proof (constant time).
    pub fn verify_over(&self, parts: &[&[u8]], proof: &[u8; 32]) -> bool {
        self.verify(&Self::message(parts), proof)
    }

    /// The dialer's `hello` proof.
    pub fn hello_proof(
        &self,
        acceptor_nonce: &[u8; 32],
        dialer_nonce: &[u8; 32],
        dialer: &NodeDescriptor,
        capability: &str,
    ) -> [u8; 32] {
        self.tag(&Self::hello_message(
            acceptor_nonce,
            dialer_nonce,
            dialer,
            capability,
        ))
    }

    /// Check a `hello` proof.
    pub fn verify_hello(
        &self,
        acceptor_nonce: &[u8; 32],
        dialer_nonce: &[u8; 32],
        dialer: &NodeDescriptor,
        capability: &str,
        proof: &[u8; 32],
    ) -> bool {
        self.verify(
            &Self::hello_message(acceptor_nonce, dialer_nonce, dialer, capability),
            proof,
        )
    }

    /// The acceptor's `admit` proof.
    pub fn admit_proof(
        &self,
        dialer_nonce: &[u8; 32],
        acceptor_nonce: &[u8; 32],
        acceptor: &NodeDescriptor,
        capability: &str,
        connection_generation: u64,
    ) -> [u8; 32] {
        self.tag(&Self::admit_message(
            dialer_nonce,
            acceptor_nonce,
            acceptor,
            capability,
            connection_generation,
        ))
    }

    /// Check an `admit` proof.
    pub fn verify_admit(
        &self,
        dialer_nonce: &[u8; 32],
        acceptor_nonce: &[u8; 32],
        acceptor: &NodeDescriptor,
        capability: &str,
        connection_generation: u64,
        proof: &[u8; 32],
    ) -> bool {
        self.verify(
            &Self::admit_message(
                dialer_nonce,
                acceptor_nonce,
                acceptor,
                capability,
                connection_generation,
            ),
            proof,
        )
    }
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// The identity fields a proof binds, length-prefixed.
pub(crate) fn identity_bytes(d: &NodeDescriptor, capability: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    for part in [
        d.mesh_name.as_bytes(),
        d.node.rid.as_bytes(),
        &d.node.lifecycle_generation.to_be_bytes(),
        &[d.object_role.to_wire()],
        d.security_identity.as_bytes(),
        capability.as_bytes(),
        &d.application_version.to_be_bytes(),
        d.endpoint.as_bytes(),
    ] {
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

/// Fill a buffer from the operating system's CSPRNG.
///
/// # Errors
/// Only when the OS random source fails, which ring reports as unspecified.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut out = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut out)?;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_protocol::generated::{NodeFence, ObjectRole, RuntimeState};

    fn desc(rid: &str) -> NodeDescriptor {
        NodeDescriptor {
            mesh_name: "m".into(),
            node: NodeFence {
                rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
                lifecycle_generation: 5,
            },
            descriptor_revision: 1,
            endpoint: "tcp://127.0.0.1:1".into(),
            security_identity: "svc".into(),
            object_role: ObjectRole::Server,
            state: RuntimeState::Serving,
            application_version: 1,
            maintenance_wave: String::new(),
            placement_weight: 100,
            entry_spot_id: String::new(),
            channels: vec![],
            object_capabilities: vec![],
        }
    }

    #[test]
    fn hello_proof_verifies_only_with_the_same_secret_nonces_and_identity() {
        let s = MeshSecret::from_bytes(b"0123456789abcdef").unwrap();
        let other = MeshSecret::from_bytes(b"0123456789abcdeX").unwrap();
        let (na, nd) = ([1u8; 32], [2u8; 32]);
        let d = desc("a");
        let p = s.hello_proof(&na, &nd, &d, "cap");
        assert!(s.verify_hello(&na, &nd, &d, "cap", &p));
        assert!(!other.verify_hello(&na, &nd, &d, "cap", &p));
        assert!(!s.verify_hello(&[3u8; 32], &nd, &d, "cap", &p));
        assert!(!s.verify_hello(&na, &[3u8; 32], &d, "cap", &p));
        assert!(!s.verify_hello(&na, &nd, &desc("b"), "cap", &p));
        let mut d2 = d.clone();
        d2.security_identity = "other".into();
        assert!(!s.verify_hello(&na, &nd, &d2, "cap", &p));
        // A hello proof is not an admit proof.
        assert!(!s.verify_admit(&na, &nd, &d, "cap", 1, &p));
    }

    #[test]
    fn admit_proof_binds_the_connection_generation() {
        let s = MeshSecret::from_bytes(b"0123456789abcdef\n").unwrap();
        let d = desc("b");
        let p = s.admit_proof(&[1; 32], &[2; 32], &d, "cap", 7);
        assert!(s.verify_admit(&[1; 32], &[2; 32], &d, "cap", 7, &p));
        assert!(!s.verify_admit(&[1; 32], &[2; 32], &d, "cap", 8, &p));
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(matches!(
            MeshSecret::from_bytes(b"short\n"),
            Err(SecretError::TooShort(5))
        ));
    }
}
