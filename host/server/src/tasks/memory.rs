//! The task board in memory: the default store, for one server.
//!
//! It keeps each task's state under its ID, for the subject that started it
//! only. A finished task is kept `--task-ttl`; the board holds at most
//! `--max-tasks` (the oldest ended ones dropped first, a running one never for
//! another) and [`TaskLimits::max_stored_bytes`] of results, and runs at most
//! [`TaskLimits::max_running`] tasks at once.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::oneshot;

use super::task::{Answer, Question, TaskLimits, TaskRefused, TaskState, TaskView, new_id};

/// One task on the board.
struct Entry {
    subject: String,
    state: TaskState,
    created: SystemTime,
    updated: SystemTime,
    /// When it was created and ended, on this process's clock (its TTL and
    /// expiry are measured with these).
    started: Instant,
    ended: Option<Instant>,
    /// Stops its execution (a dropped future cancels it).
    abort: Option<tokio::task::AbortHandle>,
    /// What its time budget grew by while it waited for input.
    extended: Duration,
    /// The question it waits on.
    question: Option<Question>,
}

impl Entry {
    /// Whether its execution runs (working, or waiting for input).
    fn runs(&self) -> bool {
        !self.state.is_terminal()
    }
}

/// The tasks of this server, in memory.
pub struct TaskBoard {
    limits: TaskLimits,
    inner: Mutex<Board>,
    /// Single-use tokens claimed ([`TaskBoard::claim`]).
    claims: Mutex<Claims>,
    /// 128 random bits of its own ([`TaskBoard::id`]).
    id: String,
}

/// Most single-use tokens held at once; past it, new claims are refused until
/// some expire.
pub const MAX_CLAIMS: usize = 100_000;
/// Most single-use tokens one subject holds at once: past it, that subject's
/// new claims are refused until some of its own expire, and nobody else's are
/// (issue 49, F1: one subject asking and declining in a loop filled
/// [`MAX_CLAIMS`] for everyone).
pub const MAX_CLAIMS_PER_SUBJECT: usize = 1_000;

/// The single-use tokens claimed: until when, and for whom.
#[derive(Default)]
struct Claims {
    tokens: HashMap<String, (Instant, String)>,
    /// How many tokens each subject holds (expired ones included until swept).
    per_subject: HashMap<String, usize>,
}

impl Claims {
    /// Forgets the tokens expired by `now`.
    fn sweep(&mut self, now: Instant) {
        let per_subject = &mut self.per_subject;
        self.tokens.retain(|_, (until, subject)| {
            let live = *until > now;
            if !live && let Some(count) = per_subject.get_mut(subject.as_str()) {
                *count = count.saturating_sub(1);
            }
            live
        });
        per_subject.retain(|_, count| *count > 0);
    }

    fn held_by(&self, subject: &str) -> usize {
        self.per_subject.get(subject).copied().unwrap_or(0)
    }
}

#[derive(Default)]
struct Board {
    entries: HashMap<String, Entry>,
    /// IDs in creation order, for dropping the oldest.
    order: VecDeque<String>,
    /// Tasks whose execution runs.
    running: usize,
    /// Bytes of the results held.
    stored: usize,
}

impl Board {
    /// Removes task `id`, keeping the counts.
    fn remove(&mut self, id: &str) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        if entry.runs() {
            self.running -= 1;
        }
        self.stored -= entry.state.bytes();
        Some(entry)
    }

    /// The ended task to drop for room: the oldest of the subject keeping the
    /// most ended tasks, so that one subject's many quick tasks push out its
    /// own results before another's (issue 49, F8).
    fn oldest_ended(&self) -> Option<String> {
        let mut kept: HashMap<&str, usize> = HashMap::new();
        for entry in self.entries.values().filter(|e| e.ended.is_some()) {
            *kept.entry(entry.subject.as_str()).or_default() += 1;
        }
        let most = kept.values().copied().max()?;
        self.order
            .iter()
            .find(|id| {
                self.entries.get(*id).is_some_and(|e| {
                    e.ended.is_some() && kept.get(e.subject.as_str()) == Some(&most)
                })
            })
            .cloned()
    }
}

impl std::fmt::Debug for TaskBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskBoard")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl TaskBoard {
    /// An empty board with `limits`.
    pub fn new(limits: TaskLimits) -> Self {
        Self {
            limits,
            inner: Mutex::new(Board::default()),
            claims: Mutex::default(),
            // Without random bytes, the process and the time tell boards apart.
            id: super::task::new_id().unwrap_or_else(|_| {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_nanos());
                format!("{:x}-{nanos:x}", std::process::id())
            }),
        }
    }

    /// Its own ID, drawn when it was made: what it claims ([`TaskBoard::claim`])
    /// is remembered by it alone, so a single-use token meant for it names it
    /// (another process, or this one after a restart, has another board).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What it allows.
    pub fn limits(&self) -> TaskLimits {
        self.limits
    }

    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new working task of `subject`. To keep at most `max_tasks`, the oldest
    /// ended tasks go (whoever's they are: results are kept for a while, not
    /// for good); a running task is never dropped for another.
    ///
    /// # Errors
    ///
    /// [`TaskRefused`]: as many tasks run as may, the board is full of running
    /// ones, or no random ID could be drawn.
    pub fn create(&self, subject: &str) -> Result<TaskView, TaskRefused> {
        let id = new_id()?;
        let now = SystemTime::now();
        let mut dropped = Vec::new();
        let mut board = self.board();
        self.expire(&mut board, &mut dropped);
        let mine = board
            .entries
            .values()
            .filter(|entry| entry.subject == subject && entry.runs())
            .count();
        if board.running >= self.limits.max_running.max(1)
            || mine >= self.limits.max_running_per_subject()
        {
            return Err(TaskRefused::Running);
        }
        while board.entries.len() >= self.limits.max_tasks.max(1) {
            let Some(oldest) = board.oldest_ended() else {
                return Err(TaskRefused::Full);
            };
            dropped.extend(board.remove(&oldest));
        }
        board.entries.insert(
            id.clone(),
            Entry {
                subject: subject.to_owned(),
                state: TaskState::Working,
                created: now,
                updated: now,
                started: Instant::now(),
                ended: None,
                abort: None,
                extended: Duration::ZERO,
                question: None,
            },
        );
        board.order.push_back(id.clone());
        board.running += 1;
        let Board { entries, order, .. } = &mut *board;
        order.retain(|id| entries.contains_key(id));
        drop(board);
        // Results are freed outside the lock.
        drop(dropped);
        Ok(TaskView {
            id,
            state: TaskState::Working,
            created: now,
            updated: now,
            ttl: self.limits.max_task_time + self.limits.ttl,
        })
    }

    /// Ties the running execution of task `id` to it, so that cancelling stops
    /// it. A task already ended (cancelled) or gone stops it at once.
    pub fn attach(&self, id: &str, abort: tokio::task::AbortHandle) {
        let mut board = self.board();
        match board.entries.get_mut(id) {
            Some(entry) if entry.runs() => entry.abort = Some(abort),
            Some(_) | None => abort.abort(),
        }
    }

    /// Task `id` of `subject`, unless it is unknown, another subject's or
    /// expired. Its result is shared, not copied.
    pub fn get(&self, subject: &str, id: &str) -> Option<TaskView> {
        let mut dropped = Vec::new();
        let view = {
            let mut board = self.board();
            self.expire(&mut board, &mut dropped);
            let entry = board.entries.get(id).filter(|e| e.subject == subject)?;
            self.view(id, entry)
        };
        drop(dropped);
        Some(view)
    }

    /// Task `id` and its subject, whoever's it is (for the store that
    /// records it).
    pub(super) fn peek(&self, id: &str) -> Option<(String, TaskView)> {
        let board = self.board();
        board
            .entries
            .get(id)
            .map(|entry| (entry.subject.clone(), self.view(id, entry)))
    }

    /// Ends task `id` with `state`, unless it ended already (a cancelled task
    /// stays cancelled) or is gone. Past [`TaskLimits::max_stored_bytes`] of results, the
    /// oldest ended tasks go.
    pub fn finish(&self, id: &str, state: TaskState) {
        self.finish_seen(id, state);
    }

    /// [`TaskBoard::finish`], answering the task's subject and view as it
    /// ended when this call ended it (taken before the results past the
    /// bound go, so even one that goes at once is answered).
    pub(super) fn finish_seen(&self, id: &str, state: TaskState) -> Option<(String, TaskView)> {
        let mut dropped = Vec::new();
        let seen = {
            let mut board = self.board();
            let bytes = state.bytes();
            let entry = board.entries.get_mut(id)?;
            if !entry.runs() {
                return None;
            }
            entry.state = state;
            entry.question = None;
            entry.updated = SystemTime::now();
            entry.ended = Some(Instant::now());
            entry.abort = None;
            let seen = (entry.subject.clone(), self.view(id, entry));
            board.running -= 1;
            board.stored += bytes;
            while board.stored > self.limits.max_stored_bytes {
                let Some(oldest) = board.oldest_ended() else {
                    break;
                };
                dropped.extend(board.remove(&oldest));
            }
            let Board { entries, order, .. } = &mut *board;
            order.retain(|id| entries.contains_key(id));
            seen
        };
        drop(dropped);
        Some(seen)
    }

    /// Cancels task `id` of `subject`: a working one is `Cancelled` at once and
    /// its execution stopped (a native call in flight is abandoned as at a
    /// deadline); an ended one stays as it is. `false` when it is not found.
    pub fn cancel(&self, subject: &str, id: &str) -> bool {
        self.cancel_seen(subject, id).0
    }

    /// [`TaskBoard::cancel`], answering also the task's view when this call
    /// cancelled it.
    pub(super) fn cancel_seen(&self, subject: &str, id: &str) -> (bool, Option<TaskView>) {
        let mut board = self.board();
        let mut dropped = Vec::new();
        self.expire(&mut board, &mut dropped);
        let Some(entry) = board.entries.get_mut(id).filter(|e| e.subject == subject) else {
            return (false, None);
        };
        if !entry.runs() {
            return (true, None);
        }
        entry.state = TaskState::Cancelled;
        entry.updated = SystemTime::now();
        entry.ended = Some(Instant::now());
        entry.question = None;
        if let Some(abort) = entry.abort.take() {
            abort.abort();
        }
        let view = self.view(id, entry);
        board.running -= 1;
        (true, Some(view))
    }

    /// Task `id` waits for the answer to `key`, showing `requests`; its time
    /// budget grows by `extend`. A task that ended (or is gone) gets an answer
    /// that never comes.
    pub fn ask(&self, id: &str, key: &str, requests: Arc<str>, extend: Duration) -> Answer {
        let (sender, answer) = oneshot::channel();
        let mut board = self.board();
        if let Some(entry) = board.entries.get_mut(id).filter(|e| e.runs()) {
            entry.state = TaskState::InputRequired(requests);
            entry.updated = SystemTime::now();
            entry.extended += extend;
            entry.question = Some(Question {
                key: key.to_owned(),
                reserved: extend,
                answer: Some(sender),
            });
        }
        answer
    }

    /// Delivers the response for the request task `id` of `subject` waits on,
    /// if `responses` has one (the rest are ignored); `false` when the task is
    /// not found.
    pub fn answer(
        &self,
        subject: &str,
        id: &str,
        responses: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        let mut board = self.board();
        let mut dropped = Vec::new();
        self.expire(&mut board, &mut dropped);
        let Some(entry) = board.entries.get_mut(id).filter(|e| e.subject == subject) else {
            return false;
        };
        let question = entry.question.as_mut().filter(|q| q.answer.is_some());
        let response = question.and_then(|question| {
            let response = responses.get(&question.key)?.clone();
            Some((response, question.answer.take()?))
        });
        if let Some((response, sender)) = response {
            entry.state = TaskState::Working;
            entry.updated = SystemTime::now();
            // The asker gave up meanwhile: nobody hears it.
            let _ = sender.send(response);
        }
        true
    }

    /// Task `id` no longer waits on `key`, after `waited`: it works again,
    /// its budget grown by the time waited.
    pub fn resume(&self, id: &str, key: &str, waited: Duration) {
        let mut board = self.board();
        let Some(entry) = board.entries.get_mut(id) else {
            return;
        };
        if let Some(question) = entry.question.take_if(|q| q.key == key) {
            entry.extended = question.settle(entry.extended, waited);
        }
        if entry.question.is_none() && matches!(entry.state, TaskState::InputRequired(_)) {
            entry.state = TaskState::Working;
            entry.updated = SystemTime::now();
        }
    }

    /// Stops every running task (the server is ending): they end `Cancelled`.
    /// Returns how many there were.
    pub fn cancel_all(&self) -> usize {
        self.cancel_running().len()
    }

    /// [`TaskBoard::cancel_all`], answering the subject and view of each task
    /// it stopped.
    pub(super) fn cancel_running(&self) -> Vec<(String, TaskView)> {
        let mut board = self.board();
        let mut cancelled = Vec::new();
        for (id, entry) in board.entries.iter_mut() {
            if entry.runs() {
                entry.state = TaskState::Cancelled;
                entry.question = None;
                entry.updated = SystemTime::now();
                entry.ended = Some(Instant::now());
                if let Some(abort) = entry.abort.take() {
                    abort.abort();
                }
                cancelled.push((entry.subject.clone(), id.clone()));
            }
        }
        board.running -= cancelled.len();
        cancelled
            .into_iter()
            .filter_map(|(subject, id)| {
                let view = board.entries.get(&id).map(|entry| self.view(&id, entry))?;
                Some((subject, view))
            })
            .collect()
    }

    /// Claims `token` for `subject` for `ttl`: `true` the first time, `false`
    /// while it is held, or when `subject` holds [`MAX_CLAIMS_PER_SUBJECT`]
    /// live tokens or all together hold [`MAX_CLAIMS`].
    pub fn claim(&self, subject: &str, token: &str, ttl: Duration) -> bool {
        let mut claims = self
            .claims
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if claims.tokens.len() >= MAX_CLAIMS || claims.held_by(subject) >= MAX_CLAIMS_PER_SUBJECT {
            claims.sweep(now);
        }
        if claims
            .tokens
            .get(token)
            .is_some_and(|(until, _)| *until > now)
            || claims.tokens.len() >= MAX_CLAIMS
            || claims.held_by(subject) >= MAX_CLAIMS_PER_SUBJECT
        {
            return false;
        }
        if let Some((_, old)) = claims
            .tokens
            .insert(token.to_owned(), (now + ttl, subject.to_owned()))
            && let Some(count) = claims.per_subject.get_mut(old.as_str())
        {
            // An expired claim of the same token, replaced.
            *count = count.saturating_sub(1);
        }
        *claims.per_subject.entry(subject.to_owned()).or_default() += 1;
        true
    }

    /// How many tasks are on the board.
    pub fn len(&self) -> usize {
        self.board().entries.len()
    }

    /// Whether the board is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves the tasks that ended more than the TTL ago into `dropped` (freed
    /// by the caller once the lock is released).
    fn expire(&self, board: &mut Board, dropped: &mut Vec<Entry>) {
        let ttl = self.limits.ttl;
        let expired = |entry: &Entry| entry.ended.is_some_and(|ended| ended.elapsed() >= ttl);
        if !board.entries.values().any(expired) {
            return;
        }
        let ids: Vec<String> = board
            .entries
            .iter()
            .filter(|(_, entry)| expired(entry))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            dropped.extend(board.remove(&id));
        }
        let Board { entries, order, .. } = board;
        order.retain(|id| entries.contains_key(id));
    }

    fn view(&self, id: &str, entry: &Entry) -> TaskView {
        let ttl = match entry.ended {
            None => self.limits.max_task_time + entry.extended + self.limits.ttl,
            Some(ended) => ended.duration_since(entry.started) + self.limits.ttl,
        };
        TaskView {
            id: id.to_owned(),
            state: entry.state.clone(),
            created: entry.created,
            updated: entry.updated,
            ttl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::MAX_STORED_BYTES;

    fn board(max_tasks: usize, max_running: usize, ttl: Duration) -> TaskBoard {
        TaskBoard::new(TaskLimits {
            max_task_time: Duration::from_secs(60),
            ttl,
            max_tasks,
            max_running,
            max_stored_bytes: MAX_STORED_BYTES,
        })
    }

    fn text(json: &str) -> TaskState {
        TaskState::Completed(Arc::from(json))
    }

    #[test]
    fn a_token_is_claimed_once_until_it_expires() {
        let board = board(10, 10, Duration::from_secs(60));
        assert!(board.claim("ada", "t1", Duration::from_secs(60)));
        assert!(!board.claim("ada", "t1", Duration::from_secs(60)));
        assert!(!board.claim("bob", "t1", Duration::from_secs(60)));
        assert!(board.claim("ada", "t2", Duration::from_secs(60)));
        assert!(board.claim("ada", "t3", Duration::ZERO));
        // Expired: claimable again.
        assert!(board.claim("ada", "t3", Duration::from_secs(60)));
    }

    /// Issue 49, F1: one subject answering and declining in a loop fills its
    /// own share of claims, not everyone's.
    #[test]
    fn one_subject_cannot_exhaust_the_claims_of_others() {
        let board = board(10, 10, Duration::from_secs(60));
        let hour = Duration::from_secs(3600);
        for n in 0..MAX_CLAIMS_PER_SUBJECT {
            assert!(board.claim("mallory", &format!("m{n}"), hour), "{n}");
        }
        assert!(!board.claim("mallory", "one-more", hour));
        assert!(board.claim("ada", "a1", hour));
        // Its own expired ones make room for it again.
        let board = self::board(10, 10, Duration::from_secs(60));
        for n in 0..MAX_CLAIMS_PER_SUBJECT {
            assert!(board.claim("mallory", &format!("m{n}"), Duration::ZERO));
        }
        assert!(board.claim("mallory", "later", hour));
    }

    #[test]
    fn a_task_is_its_subject_s_only() {
        let board = board(10, 10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        assert_eq!(task.id.len(), 32);
        assert_eq!(task.state, TaskState::Working);
        assert_eq!(task.ttl, Duration::from_secs(120));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Working)
        );
        assert_eq!(board.get("bob", &task.id), None);
        assert!(!board.cancel("bob", &task.id));
        assert_eq!(board.get("ada", "nope"), None);
        board.finish(&task.id, text("{\"x\":1}"));
        let done = board.get("ada", &task.id).unwrap();
        assert_eq!(done.state, text("{\"x\":1}"));
        assert!(done.updated >= done.created);
        // Kept its run and then the TTL after it was created.
        assert!(done.ttl >= Duration::from_secs(60) && done.ttl < Duration::from_secs(61));
    }

    #[test]
    fn cancel_ends_a_working_task_and_leaves_an_ended_one() {
        let board = board(10, 10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        assert!(board.cancel("ada", &task.id));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Cancelled)
        );
        // Its execution finishing later changes nothing.
        board.finish(&task.id, text("1"));
        assert_eq!(
            board.get("ada", &task.id).map(|t| t.state),
            Some(TaskState::Cancelled)
        );
        let done = board.create("ada").unwrap();
        board.finish(&done.id, TaskState::Failed(Arc::from("{\"code\":-32603}")));
        assert!(board.cancel("ada", &done.id));
        assert_eq!(
            board.get("ada", &done.id).map(|t| t.state),
            Some(TaskState::Failed(Arc::from("{\"code\":-32603}")))
        );
    }

    #[test]
    fn the_oldest_ended_task_goes_when_the_board_is_full_a_running_one_never() {
        let board = board(2, 10, Duration::from_secs(60));
        let first = board.create("ada").unwrap();
        let second = board.create("bob").unwrap();
        assert_eq!(board.create("ada"), Err(TaskRefused::Full));
        board.finish(&second.id, text("2"));
        let third = board.create("ada").unwrap();
        assert_eq!(board.len(), 2);
        assert_eq!(board.get("bob", &second.id), None);
        assert!(board.get("ada", &first.id).is_some());
        assert!(board.get("ada", &third.id).is_some());
        assert_eq!(TaskRefused::Full.flag(), Some("--max-tasks"));
    }

    #[test]
    fn at_most_max_running_tasks_run_at_once() {
        let board = board(10, 2, Duration::from_secs(60));
        let first = board.create("ada").unwrap();
        let _second = board.create("bob").unwrap();
        assert_eq!(board.create("ada"), Err(TaskRefused::Running));
        assert_eq!(
            TaskRefused::Running.flag(),
            Some("--max-concurrent-executions")
        );
        board.finish(&first.id, text("1"));
        let third = board.create("ada").unwrap();
        assert!(board.cancel("ada", &third.id));
        assert!(board.create("ada").is_ok());
        assert_eq!(board.cancel_all(), 2);
        assert!(board.create("ada").is_ok());
    }

    /// Issue 49, F7 and F8: one subject runs at most half of the task slots,
    /// and when room is needed its own ended tasks go before another's.
    #[test]
    fn a_subject_takes_half_the_slots_and_makes_room_from_its_own_results() {
        let board = board(4, 4, Duration::from_secs(60));
        let ada = board.create("ada").unwrap();
        board.finish(&ada.id, text("1"));
        let first = board.create("mallory").unwrap();
        let second = board.create("mallory").unwrap();
        assert_eq!(board.create("mallory"), Err(TaskRefused::Running));
        // Another subject still gets a slot.
        let bob = board.create("bob").unwrap();
        assert!(board.cancel("bob", &bob.id));
        board.finish(&first.id, text("2"));
        board.finish(&second.id, text("3"));
        // Full (4 kept, all ended): mallory's new task pushes out mallory's
        // oldest, not ada's older one.
        let third = board.create("mallory").unwrap();
        assert!(board.get("ada", &ada.id).is_some());
        assert!(board.get("bob", &bob.id).is_some());
        assert_eq!(board.get("mallory", &first.id), None);
        assert!(board.get("mallory", &third.id).is_some());
    }

    #[test]
    fn an_ended_task_expires_after_the_ttl_a_working_one_does_not() {
        let board = board(10, 10, Duration::ZERO);
        let working = board.create("ada").unwrap();
        let ended = board.create("ada").unwrap();
        board.finish(&ended.id, text("1"));
        assert_eq!(board.get("ada", &ended.id), None);
        assert!(board.get("ada", &working.id).is_some());
        assert_eq!(board.len(), 1);
        // Kept while the TTL lasts.
        let kept = self::board(10, 10, Duration::from_secs(3600));
        let task = kept.create("ada").unwrap();
        kept.finish(&task.id, text("1"));
        assert!(kept.get("ada", &task.id).is_some());
    }

    #[test]
    fn results_past_the_stored_bytes_push_the_oldest_out() {
        let board = board(10, 10, Duration::from_secs(60));
        let big = Arc::<str>::from("x".repeat(MAX_STORED_BYTES / 2 + 1));
        let first = board.create("ada").unwrap();
        board.finish(&first.id, TaskState::Completed(big.clone()));
        let second = board.create("ada").unwrap();
        board.finish(&second.id, TaskState::Completed(big));
        assert_eq!(board.get("ada", &first.id), None);
        assert!(board.get("ada", &second.id).is_some());
    }

    /// A JSON object of `pairs`.
    fn responses(
        pairs: &[(&str, serde_json::Value)],
    ) -> serde_json::Map<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.clone()))
            .collect()
    }

    #[test]
    fn a_task_waiting_for_input_gets_the_answer_to_its_key_only() {
        let board = board(10, 1, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        let requests = Arc::<str>::from("{\"approval-1\":{}}");
        let mut answer = board.ask(
            &task.id,
            "approval-1",
            requests.clone(),
            Duration::from_secs(5),
        );
        let waiting = board.get("ada", &task.id).unwrap();
        assert_eq!(waiting.state, TaskState::InputRequired(requests));
        // Its budget, and so how long it is kept, grew by the wait.
        assert_eq!(waiting.ttl, Duration::from_secs(125));
        // It still takes its running slot.
        assert_eq!(board.create("bob"), Err(TaskRefused::Running));
        // Another subject's answer finds no task; an answer to another key is
        // ignored.
        let yes = serde_json::json!({"action": "accept"});
        assert!(!board.answer("bob", &task.id, &responses(&[("approval-1", yes.clone())])));
        assert!(board.answer("ada", &task.id, &responses(&[("approval-9", yes.clone())])));
        assert!(answer.try_recv().is_err());
        assert!(board.answer(
            "ada",
            &task.id,
            &responses(&[("other", serde_json::json!(1)), ("approval-1", yes.clone())])
        ));
        assert_eq!(answer.try_recv(), Ok(yes.clone()));
        assert_eq!(
            board.get("ada", &task.id).unwrap().state,
            TaskState::Working
        );
        // Answered again: nothing waits; the task is found.
        assert!(board.answer("ada", &task.id, &responses(&[("approval-1", yes)])));
        // The wait took 2 s: the budget grew by that, not by the 5 s reserved.
        board.resume(&task.id, "approval-1", Duration::from_secs(2));
        assert_eq!(
            board.get("ada", &task.id).unwrap().ttl,
            Duration::from_secs(122)
        );
        // Given up on after all its time: it works again; resuming another
        // question changes nothing.
        let _unanswered = board.ask(
            &task.id,
            "approval-2",
            Arc::from("{}"),
            Duration::from_secs(5),
        );
        board.resume(&task.id, "approval-1", Duration::ZERO);
        assert!(matches!(
            board.get("ada", &task.id).unwrap().state,
            TaskState::InputRequired(_)
        ));
        board.resume(&task.id, "approval-2", Duration::from_secs(7));
        let resumed = board.get("ada", &task.id).unwrap();
        assert_eq!(resumed.state, TaskState::Working);
        assert_eq!(resumed.ttl, Duration::from_secs(127));
        // Cancelled while it waits: the wait ends, the task stays cancelled.
        let mut ended = board.ask(&task.id, "approval-3", Arc::from("{}"), Duration::ZERO);
        assert!(board.cancel("ada", &task.id));
        assert_eq!(
            ended.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed)
        );
        board.resume(&task.id, "approval-3", Duration::ZERO);
        assert_eq!(
            board.get("ada", &task.id).unwrap().state,
            TaskState::Cancelled
        );
        // An ended task is not asked.
        let mut never = board.ask(&task.id, "approval-4", Arc::from("{}"), Duration::ZERO);
        assert_eq!(
            never.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(
            board.get("ada", &task.id).unwrap().state,
            TaskState::Cancelled
        );
    }

    #[tokio::test]
    async fn cancelling_stops_the_attached_execution() {
        let board = board(10, 10, Duration::from_secs(60));
        let task = board.create("ada").unwrap();
        let running = tokio::spawn(std::future::pending::<()>());
        board.attach(&task.id, running.abort_handle());
        assert!(board.cancel("ada", &task.id));
        assert!(running.await.is_err_and(|e| e.is_cancelled()));
        // Attached after it was cancelled: stopped at once.
        let late = tokio::spawn(std::future::pending::<()>());
        board.attach(&task.id, late.abort_handle());
        assert!(late.await.is_err_and(|e| e.is_cancelled()));
        // The server ending stops every running one.
        let other = board.create("bob").unwrap();
        let running = tokio::spawn(std::future::pending::<()>());
        board.attach(&other.id, running.abort_handle());
        assert_eq!(board.cancel_all(), 1);
        assert!(running.await.is_err_and(|e| e.is_cancelled()));
        assert_eq!(
            board.get("bob", &other.id).map(|t| t.state),
            Some(TaskState::Cancelled)
        );
    }
}
