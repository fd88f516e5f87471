//! Node configuration: the spec's default settings and the rules that relate settings.
//!
//! [`defaults`] holds one constant per spec default. The functions here check rules that involve
//! more than one setting; each is pure (values in, `Result` out), so the future node
//! configuration type can call them from its `validate()` and tests can call them directly.

pub mod defaults;

use std::time::Duration;

use thiserror::Error;

use self::defaults::ROUTE_CACHE_FOLLOW_MARGIN;

/// A configuration that breaks a rule of the spec.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// `RouteCacheMaxAge` is not at least [`ROUTE_CACHE_FOLLOW_MARGIN`] shorter than
    /// `MessageFollowDuration` while both are positive (routing §2.5).
    #[error(
        "RouteCacheMaxAge ({route_cache_max_age:?}) must be at least {margin:?} shorter than \
         MessageFollowDuration ({message_follow_duration:?}) when both are positive, so that a \
         cached route to an old owner expires before its Message Follow route closes"
    )]
    RouteCacheOutlivesMessageFollow {
        /// The configured `RouteCacheMaxAge`.
        route_cache_max_age: Duration,
        /// The configured `MessageFollowDuration`.
        message_follow_duration: Duration,
        /// The required margin, [`ROUTE_CACHE_FOLLOW_MARGIN`].
        margin: Duration,
    },
}

/// Checks that `RouteCacheMaxAge` is at least 5 s shorter than `MessageFollowDuration` when both
/// are positive (routing §2.5).
///
/// Why: after a relocation, a sender may still hold a cached route to the old owner; the old
/// owner relays such messages only while its Message Follow route lives. The cache entry must
/// therefore expire before the detour path closes. A zero value switches the respective feature
/// off, and then the rule does not apply.
///
/// # Errors
///
/// [`ConfigError::RouteCacheOutlivesMessageFollow`] naming both values when the rule is broken.
pub fn validate_route_cache_vs_follow(
    route_cache_max_age: Duration,
    message_follow_duration: Duration,
) -> Result<(), ConfigError> {
    if route_cache_max_age.is_zero() || message_follow_duration.is_zero() {
        return Ok(());
    }
    match route_cache_max_age.checked_add(ROUTE_CACHE_FOLLOW_MARGIN) {
        Some(required_follow) if required_follow <= message_follow_duration => Ok(()),
        _ => Err(ConfigError::RouteCacheOutlivesMessageFollow {
            route_cache_max_age,
            message_follow_duration,
            margin: ROUTE_CACHE_FOLLOW_MARGIN,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn rejection(cache: Duration, follow: Duration) -> ConfigError {
        ConfigError::RouteCacheOutlivesMessageFollow {
            route_cache_max_age: cache,
            message_follow_duration: follow,
            margin: ROUTE_CACHE_FOLLOW_MARGIN,
        }
    }

    #[test]
    fn cache_exactly_five_seconds_shorter_than_follow_is_accepted() {
        assert_eq!(validate_route_cache_vs_follow(secs(25), secs(30)), Ok(()));
    }

    #[test]
    fn cache_much_shorter_than_follow_is_accepted() {
        assert_eq!(
            validate_route_cache_vs_follow(Duration::from_millis(1), secs(30)),
            Ok(())
        );
    }

    #[test]
    fn cache_one_millisecond_too_long_is_rejected() {
        let cache = secs(25) + Duration::from_millis(1);
        assert_eq!(
            validate_route_cache_vs_follow(cache, secs(30)),
            Err(rejection(cache, secs(30)))
        );
    }

    #[test]
    fn cache_as_long_as_follow_is_rejected() {
        assert_eq!(
            validate_route_cache_vs_follow(secs(30), secs(30)),
            Err(rejection(secs(30), secs(30)))
        );
    }

    #[test]
    fn cache_longer_than_follow_is_rejected() {
        assert_eq!(
            validate_route_cache_vs_follow(secs(60), secs(30)),
            Err(rejection(secs(60), secs(30)))
        );
    }

    #[test]
    fn follow_shorter_than_the_margin_rejects_any_positive_cache() {
        let cache = Duration::from_nanos(1);
        assert_eq!(
            validate_route_cache_vs_follow(cache, secs(4)),
            Err(rejection(cache, secs(4)))
        );
    }

    #[test]
    fn disabled_route_cache_accepts_any_follow_duration() {
        assert_eq!(
            validate_route_cache_vs_follow(Duration::ZERO, secs(1)),
            Ok(())
        );
    }

    #[test]
    fn disabled_message_follow_accepts_any_cache_age() {
        assert_eq!(
            validate_route_cache_vs_follow(secs(600), Duration::ZERO),
            Ok(())
        );
    }

    #[test]
    fn largest_cache_age_is_rejected_without_overflow() {
        assert_eq!(
            validate_route_cache_vs_follow(Duration::MAX, Duration::MAX),
            Err(rejection(Duration::MAX, Duration::MAX))
        );
    }

    #[test]
    fn rejection_message_names_both_settings_and_their_values() {
        let message = rejection(secs(28), secs(30)).to_string();
        assert!(message.contains("RouteCacheMaxAge (28s)"), "{message}");
        assert!(message.contains("MessageFollowDuration (30s)"), "{message}");
        assert!(message.contains("at least 5s shorter"), "{message}");
    }
}
