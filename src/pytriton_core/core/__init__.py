"""The core: requests and responses, models, instances and their statistics."""
