//! ZeroMQ transport: the socket pump ([`pump`]) and the transport header ([`header`]) that
//! carries leg, connection epoch, sequence and flow charge in front of every service record.

pub mod header;
pub mod pump;
