"""The training algorithm as pure logic (no I/O, no threads): staleness control,
group collection, advantages, the loss and the curriculum."""
