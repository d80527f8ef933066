"""Alerts an account holder sets for themselves: the low-balance SMS (CUSTOMERS.md, "The first
five minutes": `/dashboard/alerts`, `low_balance_toman`). See low_balance.py."""
