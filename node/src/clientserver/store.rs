//! The part of the Location Store the ClientServer Channel uses (glossary §6 "Automatic
//! discovery", "ClientServer Server descriptor", §8 "Owner lease"), object-safe so the
//! client and server are not generic over the provider. Every [`LocationStore`] is one.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use zlink_store::types::{
    DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, OwnerToken, PublishOutcome,
};
use zlink_store::{LocationStore, StoreError};

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Lease, publish, list and remove of ClientServer Server descriptors.
pub trait ClientServerStore: Send + Sync + 'static {
    /// See [`LocationStore::claim_lease`].
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant>;
    /// See [`LocationStore::renew_lease`].
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant>;
    /// See [`LocationStore::release_lease`].
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool>;
    /// See [`LocationStore::publish_descriptor`].
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome>;
    /// [`LocationStore::list_descriptors`] of kind ClientServerServer in `channel`.
    fn list_servers<'a>(&'a self, channel: &'a str) -> BoxFut<'a, Vec<DescriptorRecord>>;
    /// See [`LocationStore::remove_descriptor`].
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool>;
}

impl<S: LocationStore> ClientServerStore for S {
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        Box::pin(LocationStore::claim_lease(self, owner_id, ttl))
    }
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        Box::pin(LocationStore::renew_lease(self, token, ttl))
    }
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool> {
        Box::pin(LocationStore::release_lease(self, token))
    }
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome> {
        Box::pin(LocationStore::publish_descriptor(
            self,
            owner,
            key,
            lifecycle_generation,
            revision,
            content,
        ))
    }
    fn list_servers<'a>(&'a self, channel: &'a str) -> BoxFut<'a, Vec<DescriptorRecord>> {
        Box::pin(LocationStore::list_descriptors(
            self,
            DescriptorKind::ClientServerServer,
            channel,
        ))
    }
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool> {
        Box::pin(LocationStore::remove_descriptor(self, owner, key))
    }
}
