"""The fixed strings of a message, per ``TRACEHOUND_LANGUAGE``: the team reads its own language.

The model writes the analysis' prose in that language (shared/analyze/llm.py tells it); these
are the headings and labels around it. A language without a table here gets English labels.
Placeholders are ``str.format`` fields.
"""

from __future__ import annotations

PHRASES: dict[str, dict[str, str]] = {
    "en": {
        "error": "Error",
        "summary": "Summary",
        "causes": "Probable causes",
        "leads": "Possible leads (weak evidence)",
        "cause": "Cause",
        "lead": "Possible lead",
        "confidence": "confidence",
        "fix": "Suggested fix",
        "fix_short": "Fix",
        "files": "Relevant files",
        "files_short": "Files",
        "changes": "Recent changes",
        "last_change": "Last change to",
        "no_code": "no relevant code was found in the index.",
        "no_code_short": "no relevant code found",
        "weak_files": "No strongly relevant code was found.",
        "weak_files_more": "The closest files, weak matches and not a diagnosis:",
        "weak_files_short": "No strongly relevant code was found; closest:",
        "trace": "Stack trace (last {n} lines)",
        "degraded": "analysis: degraded ({reason})",
        "degraded_short": "analysis degraded ({reason})",
        "note": "Note",
        "event": "event",
        "repo": "repo",
        "release": "release",
        "times": "{count} times",
        "once": "{count} time",
        "incident": "Incident: one root cause in {groups} error groups, {services} services, "
        "{events} events",
        "incident_more": "{groups} more groups, {events} events",
        "incident_thread": "Each group's analysis follows in the thread, most frequent first.",
        "cap_batch": "{groups} new error groups from {service} over the cap of {cap} new "
        "analyses per {minutes} min, {events} events",
        "cap_waiting": "{waiting} still wait for analysis: each is analysed in order of count "
        "while the model host is free, in this thread.",
        "cap_done": "All analysed: each group's analysis is in this thread.",
        "first_seen": "first seen {when}",
        "last_seen": "last seen {when}",
        "owners": "Owners",
        "deploy": "Deploy",
        "deploy_after": "first seen {span} after deploy {version}{range}{env}",
        "deploy_env": " to {env}",
        "release_after": "first seen {span} after release {version} first appeared in events "
        "(no deploy was announced)",
        "suspects_in": "suspect commit {shas} came with it",
        "suspects_out": "the suspect commits ({shas}) are older than it",
        "span_now": "under a minute",
        "span_min": "{m} min",
        "span_hours": "{h} h {m} min",
        "span_days": "{d} d {h} h",
        "memory": "Seen before",
        "memory_like": "looks like {title} (first seen {when})",
        "memory_resolved": "resolved by {who} on {when}",
        "memory_commit": "code {commit}",
        "memory_thread": "thread",
        "memory_open": "not resolved yet",
        "memory_file": "from memory: the file confirmed for that group",
    },
    "ko": {
        "error": "오류",
        "summary": "요약",
        "causes": "추정 원인",
        "leads": "가능한 단서 (근거 약함)",
        "cause": "원인",
        "lead": "가능한 단서",
        "confidence": "신뢰도",
        "fix": "제안하는 수정",
        "fix_short": "수정",
        "files": "관련 파일",
        "files_short": "파일",
        "changes": "최근 변경",
        "last_change": "마지막 변경",
        "no_code": "인덱스에서 관련 코드를 찾지 못했습니다.",
        "no_code_short": "관련 코드 없음",
        "weak_files": "뚜렷하게 관련된 코드를 찾지 못했습니다.",
        "weak_files_more": "가장 가까운 파일이며, 약한 일치일 뿐 진단이 아닙니다:",
        "weak_files_short": "뚜렷하게 관련된 코드 없음; 가장 가까운 파일:",
        "trace": "스택 트레이스 (마지막 {n}줄)",
        "degraded": "분석: 제한됨 ({reason})",
        "degraded_short": "분석 제한됨 ({reason})",
        "note": "참고",
        "event": "이벤트",
        "repo": "저장소",
        "release": "릴리스",
        "times": "{count}회",
        "once": "{count}회",
        "incident": "장애: 같은 근본 원인의 오류 그룹 {groups}개, 서비스 {services}개, "
        "이벤트 {events}건",
        "incident_more": "그 밖의 그룹 {groups}개, 이벤트 {events}건",
        "incident_thread": "그룹별 분석은 스레드에 발생 빈도순으로 이어집니다.",
        "cap_batch": "{service}의 새 오류 그룹 {groups}개가 {minutes}분당 새 분석 {cap}개 한도를 "
        "넘었습니다, 이벤트 {events}건",
        "cap_waiting": "{waiting}개가 분석을 기다립니다: 모델 호스트가 비는 대로 발생 빈도순으로 "
        "분석되어 이 스레드에 이어집니다.",
        "cap_done": "모두 분석되었습니다: 그룹별 분석은 이 스레드에 있습니다.",
        "first_seen": "최초 {when}",
        "last_seen": "최근 {when}",
        "owners": "담당자",
        "deploy": "배포",
        "deploy_after": "배포 {version}{range}{env} 후 {span} 만에 처음 발생",
        "deploy_env": " ({env})",
        "release_after": "릴리스 {version}이(가) 이벤트에 처음 나타난 후 {span} 만에 처음 발생 "
        "(배포 알림 없음)",
        "suspects_in": "의심 커밋 {shas}이(가) 이 배포에 포함됨",
        "suspects_out": "의심 커밋({shas})은 이 배포보다 이전 것임",
        "span_now": "1분 미만",
        "span_min": "{m}분",
        "span_hours": "{h}시간 {m}분",
        "span_days": "{d}일 {h}시간",
        "memory": "이전 사례",
        "memory_like": "{title}와(과) 같은 오류로 보입니다 (최초 {when})",
        "memory_resolved": "{who}님이 {when}에 해결",
        "memory_commit": "코드 {commit}",
        "memory_thread": "스레드",
        "memory_open": "아직 해결되지 않음",
        "memory_file": "이전 사례: 그 그룹에서 확인된 파일",
    },
}


def phrase(language: str, key: str, **fields: object) -> str:
    """The string ``key`` in ``language`` (its base: ``ko-KR`` reads ``ko``), else English."""
    table = PHRASES.get(language) or PHRASES.get(language.split("-", 1)[0]) or PHRASES["en"]
    text = table.get(key) or PHRASES["en"][key]
    return text.format(**fields) if fields else text


__all__ = ["PHRASES", "phrase"]
