"""The data's model: spec files, schemas, the geography and its spine, the schema's rules, block histograms."""
