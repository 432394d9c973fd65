"""The release frame and its run directory: where each file lives, the manifest, signing, checkpoints, the publishable bundle."""
