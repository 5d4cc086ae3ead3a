"""An example task of one's own: a small CNN that tells three drawn shapes apart (`shapes.task`)."""
