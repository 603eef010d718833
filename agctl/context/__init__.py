"""The context model: messages, slots and sessions as data, the view a request is built
from, budgets, token counts, the provider's cache, prices."""
