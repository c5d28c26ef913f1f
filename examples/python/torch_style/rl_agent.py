#!/usr/bin/env python3
"""An RL agent with observers, written as a torch.distributed.rpc program;
`import ferry as rpc` is its only ferry line.

Rank 0 is the agent: it holds the policy (a tiny network) and creates one
Observer on every other rank with rpc.remote(). Each episode, the agent
asks every observer to run an episode (through the observer RRefs'
rpc_async() proxies); an observer steps its own environment and, for every
step, asks the agent for an action through the agent's RRef
(rpc_sync() proxy, the agent RRef passed to it as an argument) and reports
the reward. After each episode the agent updates the policy with
REINFORCE, using torch's local autograd on the agent.

The environment: a state of 4 numbers; the reward is 1 when the action
(0 or 1) is the sign of the state's first number, else 0. A policy that
learnt it earns ~1 per step.

    python3 rl_agent.py --rank R --world-size N     # one process per rank
    RANK=R WORLD_SIZE=N python3 rl_agent.py          # as torchrun starts it

MASTER_ADDR / MASTER_PORT default to localhost:29500.
"""

import argparse
import os
import threading

import torch
import torch.nn as nn
from torch.distributions import Categorical

import ferry as rpc  # torch: import torch.distributed.rpc as rpc

STATE = 4
STEPS = 10
EPISODES = 60


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(STATE, 2)

    def forward(self, x):
        return torch.softmax(self.layer(x), dim=-1)


class Observer:
    """Lives on an observer rank: steps its environment, asks the agent."""

    def __init__(self):
        self.rank = rpc.get_worker_info().id
        self.gen = torch.Generator().manual_seed(self.rank)

    def run_episode(self, agent_rref, n_steps):
        state = torch.randn(STATE, generator=self.gen)
        total = 0.0
        for _ in range(n_steps):
            action = agent_rref.rpc_sync().select_action(self.rank, state)
            reward = 1.0 if action == int(state[0] > 0) else 0.0
            agent_rref.rpc_sync().report_reward(self.rank, reward)
            total += reward
            state = torch.randn(STATE, generator=self.gen)
        return total


class Agent:
    def __init__(self, world_size):
        torch.manual_seed(0)
        self.policy = Policy()
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=0.2)
        self.lock = threading.Lock()
        self.ob_rrefs = []
        self.agent_rref = rpc.RRef(self)
        for ob_rank in range(1, world_size):
            ob_info = rpc.get_worker_info(f"observer{ob_rank}")
            self.ob_rrefs.append(rpc.remote(ob_info, Observer))
        self.log_probs = {ob.owner().id: [] for ob in self.ob_rrefs}
        self.rewards = {ob.owner().id: [] for ob in self.ob_rrefs}

    def select_action(self, ob_id, state):
        probs = self.policy(state.unsqueeze(0))
        m = Categorical(probs)
        action = m.sample()
        with self.lock:
            self.log_probs[ob_id].append(m.log_prob(action))
        return action.item()

    def report_reward(self, ob_id, reward):
        with self.lock:
            self.rewards[ob_id].append(reward)

    def run_episode(self):
        futs = [ob.rpc_async(timeout=30).run_episode(self.agent_rref, STEPS)
                for ob in self.ob_rrefs]
        return sum(fut.wait() for fut in futs) / (STEPS * len(futs))

    def finish_episode(self):
        log_probs, returns = [], []
        for ob_id in self.rewards:
            log_probs.extend(self.log_probs[ob_id])
            returns.extend(self.rewards[ob_id])
            self.log_probs[ob_id], self.rewards[ob_id] = [], []
        returns = torch.tensor(returns)
        returns = returns - returns.mean()
        loss = -(torch.cat(log_probs) * returns).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()


def run_agent(world_size):
    agent = Agent(world_size)
    for ob in agent.ob_rrefs:  # user RRefs to the observers, each owned by its rank
        assert ob.owner_name().startswith("observer") and not ob.is_owner()
    first = [agent.run_episode() for _ in range(3)]
    agent.finish_episode()
    for _ in range(EPISODES):
        last = agent.run_episode()
        agent.finish_episode()
    tail = [agent.run_episode() for _ in range(5)]
    start, end = sum(first) / len(first), sum(tail) / len(tail)
    print(f"agent: mean reward per step {start:.2f} -> {end:.2f} "
          f"({len(agent.ob_rrefs)} observers, {EPISODES} episodes, last {last:.2f})")
    assert end > 0.8 and end > start, (start, end)
    print("rl agent OK")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None)
    a = p.parse_args()
    rank = a.rank if a.rank is not None else int(os.environ["RANK"])
    world_size = a.world_size if a.world_size is not None else int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29500")
    name = "agent" if rank == 0 else f"observer{rank}"
    rpc.init_rpc(name, rank=rank, world_size=world_size)
    if rank == 0:
        run_agent(world_size)
    rpc.shutdown()
    print(f"{name} done")


if __name__ == "__main__":
    main()
