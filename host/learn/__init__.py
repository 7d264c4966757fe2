"""Host (CPython): Learning: layers (forward and backward), losses, optimizers, the models,
training. """
