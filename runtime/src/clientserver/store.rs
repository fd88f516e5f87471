//! The part of the Location Store the ClientServer Channel uses (glossary §6 "Automatic
//! discovery", "ClientServer Server descriptor", §8 "Owner lease"): the same object-safe
//! backend the MeshNode and classic fanout use ([`DiscoveryBackend`]), under the name the
//! ClientServer API has always used. Every `LocationStore` is one.

pub use crate::mesh::discovery::DiscoveryBackend as ClientServerStore;
