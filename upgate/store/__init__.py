"""The store: Redis connections, every key name, the Lua library and the store's policy."""
