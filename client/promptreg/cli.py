def main() -> int:
    raise SystemExit("not yet")
