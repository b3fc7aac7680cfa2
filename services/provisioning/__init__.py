"""Provisioning: a declarative federation description to certificates, configs and compose files (mpdp provision)."""
