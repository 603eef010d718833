"""The PostgreSQL backend (agctl[postgres]): see backend.py."""
