"""The file backend: sessions as plain JSON files under one data directory."""
