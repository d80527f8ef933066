"""upgate-admin: the operator CLI (accounts, keys, catalog, usage)."""
