"""Task submission schema v1: the model, its validation into plain-English problems, file loading.

    from shared.submission import validate_submission, SubmissionInvalid
    try:
        task = validate_submission(body)
    except SubmissionInvalid as invalid:
        for problem in invalid.problems:  # field, value, expected
            print(problem)
"""

from shared.submission.fields import S3Location, S3Uri, parse_s3_uri
from shared.submission.limits import DEFAULT_LIMITS, SubmissionLimits, site_limits
from shared.submission.model import (
    CardTypeFilter,
    CheckpointPolicy,
    Command,
    DatasetRef,
    HeavyResource,
    InputRef,
    TaskSubmission,
)
from shared.submission.problems import Problem, describe, field_path, problems_from
from shared.submission.validate import (
    SubmissionFileError,
    SubmissionInvalid,
    load_submission_file,
    submission_field_names,
    validate_submission,
)

__all__ = [
    "CardTypeFilter",
    "CheckpointPolicy",
    "Command",
    "DatasetRef",
    "HeavyResource",
    "InputRef",
    "Problem",
    "S3Location",
    "S3Uri",
    "SubmissionFileError",
    "SubmissionInvalid",
    "SubmissionLimits",
    "DEFAULT_LIMITS",
    "TaskSubmission",
    "describe",
    "field_path",
    "load_submission_file",
    "parse_s3_uri",
    "site_limits",
    "problems_from",
    "submission_field_names",
    "validate_submission",
]
