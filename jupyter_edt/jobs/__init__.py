"""Jobs: what a user submitted (models), where it is kept (store), and its lifecycle (service)."""
