"""The companion sync controller (`mcsdns controller`), KEP-1645 ServiceExport → ServiceImport."""
