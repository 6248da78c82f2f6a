//! The vocabulary of the service: short codes and target URLs, each parsed
//! and checked once at the edge so that the layers below never see raw input.

pub(crate) mod classify;
pub mod code;
pub(crate) mod codebook;
mod host;
pub mod label;
mod link;
pub(crate) mod rules;
mod target;
pub mod user;
pub(crate) mod visit;
pub mod wire;

pub use code::{
    Alias, AliasError, CodeGenerator, CodeLengthError, CodeSettings, ShortCode, ShortCodeError,
    is_reserved,
};
pub(crate) use codebook::{CodeKey, Codebook};
pub(crate) use host::client_block;
pub use host::{
    DEFAULT_NAME, Domain, DomainId, DomainRedirects, Host, HostError, LinkKey, MAX_HOST_LEN,
};
pub use label::{Labels, Tags, Title};
pub use link::{KeyId, Link, Owner, Resolved, Timestamp, TimestampError, extra_of};
pub(crate) use rules::{LinkRules, Password, PasswordHash, Rules};
pub use target::{
    DenyListError, MAX_URL_BYTES, TargetPolicy, TargetUrl, TargetUrlError, is_private_ip,
};
pub use user::{Role, UserId};
pub(crate) use visit::{AgentClass, Country, Dim, Facets, HourCount, VisitCounts};
