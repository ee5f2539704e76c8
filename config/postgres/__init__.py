"""The PostgreSQL backend the settings name (ENGINE "config.postgres"): see base.py."""
