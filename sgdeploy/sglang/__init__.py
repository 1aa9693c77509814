"""What sgdeploy knows about SGLang: flag catalogs per version and cross-flag rules."""
