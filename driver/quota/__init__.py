"""Namespace GPU budgets: the pure model (budget.py) and the controller webhook's handler (webhook.py)."""
