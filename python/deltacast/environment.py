"""The rails and token a worker of an inference engine (or an unchanged checkpoint-engine script)
cannot be handed through its engine's API, taken from the environment: one place, so every
integration reads DELTACAST_RAILS and DELTACAST_TOKEN the same way."""
import os


def rails_or_env(rails):
    """`rails` (an address or a list), else DELTACAST_RAILS (comma-separated), as a list."""
    if rails is None:
        rails = os.environ.get("DELTACAST_RAILS", "").split(",")
    return [r.strip() for r in ([rails] if isinstance(rails, str) else rails) if r.strip()]


def token_or_env(token):
    """`token`, else DELTACAST_TOKEN (None when neither is set)."""
    return os.environ.get("DELTACAST_TOKEN") if token is None else token
