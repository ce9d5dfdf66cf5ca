"""Error codes of the chat contract (DESIGN §4) and the application's error family."""

TOKEN_INVALID = 40101
INVALID_BODY = 40001
CAMPUS_TOKEN_EXPIRED = 40102
SUBAGENT_INTERNAL = 50001
GENERAL = 50002
DOWNSTREAM = 50003


class ApplicationError(Exception):
    """An error with a contract code and a message a user may read."""

    code = GENERAL
    status = 500

    def __init__(self, message: str, *, code: int | None = None, status: int | None = None):
        message = str(message)  # a lazy translation: in the language of the request raising it
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
