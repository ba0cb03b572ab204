"""The shop's app: the Order model, its view and its tasks."""
