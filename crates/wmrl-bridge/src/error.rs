//! The bridge's error type.

use thiserror::Error;
use wmrl_env::EnvError;

use crate::protocol::{ErrorKind, WireError};

/// Everything the bridge can fail at outside the [`wmrl_env::VecEnv`]
/// surface (which reports [`EnvError`]s).
#[derive(Debug, Error)]
pub enum BridgeError {
    #[error("zeromq error at {endpoint}: {source}")]
    Zmq {
        endpoint: String,
        #[source]
        source: zmq::Error,
    },
    #[error("{endpoint} replied with a {:?} error: {}", .error.kind, .error.message)]
    Remote { endpoint: String, error: WireError },
    #[error("{endpoint} did not answer within {timeout_ms} ms")]
    Timeout { endpoint: String, timeout_ms: u64 },
    #[error("no worker answered: {0}")]
    NoWorkers(String),
    #[error("workers disagree: {0}")]
    Mismatch(String),
    #[error("simulator worker process: {0}")]
    Spawn(String),
    #[error(transparent)]
    Env(#[from] EnvError),
}

impl BridgeError {
    pub(crate) fn zmq(endpoint: &str, source: zmq::Error) -> Self {
        Self::Zmq {
            endpoint: endpoint.to_string(),
            source,
        }
    }
}

impl From<BridgeError> for EnvError {
    fn from(e: BridgeError) -> Self {
        let message = e.to_string();
        match e {
            BridgeError::Env(e) => e,
            BridgeError::NoWorkers(m) => EnvError::NoWorkers(m),
            BridgeError::Timeout { endpoint, .. } | BridgeError::Zmq { endpoint, .. } => {
                EnvError::WorkerDown {
                    endpoint,
                    reason: message,
                }
            }
            BridgeError::Remote { error, .. } => match error.kind {
                ErrorKind::BadAction => EnvError::InvalidAction(error.message),
                ErrorKind::Sim => EnvError::Sim(error.message),
                _ => EnvError::Protocol(message),
            },
            BridgeError::Mismatch(_) => EnvError::Protocol(message),
            BridgeError::Spawn(m) => EnvError::NoWorkers(m),
        }
    }
}

pub type Result<T, E = BridgeError> = std::result::Result<T, E>;
