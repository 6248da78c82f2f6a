//! The vocabulary of the service: short codes and target URLs, each parsed
//! and checked once at the edge so that the layers below never see raw input.

pub mod code;
mod target;

pub use code::{CodeGenerator, CodeLengthError, CodeSettings, ShortCode, ShortCodeError};
pub use target::{MAX_URL_BYTES, TargetUrl, TargetUrlError};
