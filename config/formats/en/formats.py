"""One date format in every admin page, the stock lists (audit log, API keys) included: ISO
8601 with the time zone (the server runs in UTC), so a date never reads differently by page."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
