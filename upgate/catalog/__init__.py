"""The model catalog: its rules, its copy in Redis, each node's cache, and price sync."""
