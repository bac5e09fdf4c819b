//! Interval estimates for benchmark tables: the ones both tracks share,
//! from [`wmrl_core::stats`].

pub use wmrl_core::stats::{MeanCi, Z_95, t_975, wilson, wilson_interval};
