//! The P4Runtime messages and gRPC service, generated at build time from the
//! descriptors the `p4runtime` Python wheel embeds (see build.rs). Packages are
//! nested as in the .proto files so the generated cross-package paths resolve;
//! google.protobuf well-known types come from `prost_types`.
#![allow(clippy::all, missing_docs, rustdoc::all)]

/// `p4.*` packages.
pub mod p4 {
    /// `p4.v1`: the P4Runtime service, entities and stream messages.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/p4.v1.rs"));
    }
    /// `p4.config.*`.
    pub mod config {
        /// `p4.config.v1`: P4Info.
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/p4.config.v1.rs"));
        }
    }
}

/// `google.*` packages.
pub mod google {
    /// `google.rpc`: Status and Code, used for P4Runtime's per-update write errors.
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// The version of the `p4runtime` wheel the messages were generated from.
pub const P4RUNTIME_VERSION: &str =
    include_str!(concat!(env!("OUT_DIR"), "/p4runtime_version.txt"));
