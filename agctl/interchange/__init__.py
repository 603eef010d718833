"""Conversations in and out of agctl (OpenAI arrays, JSON lines, Markdown, exports) and
across stores."""
