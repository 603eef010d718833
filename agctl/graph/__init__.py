"""`session graph`: the model of how sessions, slots and checkpoints came from one another
(model.py) and its renderers, each a pure function of the model's JSON form."""
